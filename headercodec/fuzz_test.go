package headercodec_test

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"unicode/utf8"

	"github.com/relayer-go/watermill-outbox/headercodec"
)

// FuzzDecode: arbitrary bytes never panic; what decodes re-encodes to the same bytes (the
// format has exactly one encoding per header list), and Validate, Decode and
// DecodeMetadata agree on whether the input is valid; DecodeMetadataInto adds what
// DecodeMetadata returns to a map and leaves it unchanged on an invalid input.
func FuzzDecode(f *testing.F) {
	for _, g := range golden {
		f.Add(unhex(f, g.hex))
	}
	for _, c := range decodeErrors {
		f.Add(unhex(f, c.hex))
	}
	f.Add(headercodec.Encode(nil, makeHeaders(256)))
	f.Fuzz(func(t *testing.T, src []byte) {
		orig := bytes.Clone(src)
		hs, err := headercodec.Decode(src, nil)
		verr := headercodec.Validate(src)
		md, merr := headercodec.DecodeMetadata(src)
		into := map[string]string{"kept": "yes"}
		ierr := headercodec.DecodeMetadataInto(into, src)
		if (ierr == nil) != (merr == nil) {
			t.Fatalf("DecodeMetadataInto error %v but DecodeMetadata %v", ierr, merr)
		}
		wantInto := map[string]string{"kept": "yes"} // unchanged on an error
		if ierr == nil {
			maps.Copy(wantInto, md) // DecodeMetadata's entries over the existing one
		}
		if !maps.Equal(into, wantInto) {
			t.Fatalf("DecodeMetadataInto gave %q, want %q", into, wantInto)
		}
		if !bytes.Equal(src, orig) {
			t.Fatal("decoding modified its input")
		}
		if err != nil {
			if !errors.Is(err, headercodec.ErrCorrupt) {
				t.Fatalf("Decode error %q does not wrap ErrCorrupt", err)
			}
			if verr == nil || verr.Error() != err.Error() {
				t.Fatalf("Decode error %q but Validate %v", err, verr)
			}
			if merr == nil || merr.Error() != err.Error() {
				t.Fatalf("Decode error %q but DecodeMetadata %v", err, merr)
			}
			if len(hs) != 0 || md != nil {
				t.Fatal("a failed decode returned entries")
			}
			return
		}
		if verr != nil || merr != nil {
			t.Fatalf("Decode succeeded but Validate %v, DecodeMetadata %v", verr, merr)
		}
		if again := headercodec.Encode(nil, hs); !bytes.Equal(again, src) {
			t.Fatalf("re-encoding %q gave %x, input was %x", hs, again, src)
		}
		want := map[string]string{} // last duplicate wins
		for _, h := range hs {
			if !utf8.ValidString(h.Name) {
				t.Fatalf("decoded invalid UTF-8 name %q", h.Name)
			}
			want[h.Name] = string(h.Value)
		}
		if len(md) != len(want) {
			t.Fatalf("DecodeMetadata has %d names, Decode %d distinct", len(md), len(want))
		}
		for k, v := range want {
			if got, ok := md[k]; !ok || got != v {
				t.Fatalf("DecodeMetadata[%q] = %q, want %q", k, got, v)
			}
		}
	})
}

// FuzzRoundTrip: any header list with valid UTF-8 names survives Encode then Decode with
// order, duplicates, empty values and arbitrary value bytes intact; an invalid name is
// reported by Decode instead of being altered.
func FuzzRoundTrip(f *testing.F) {
	f.Add("a", []byte("b"), "c", []byte{}, uint8(0))
	f.Add("k", []byte("1"), "k", []byte("2"), uint8(1))
	f.Add("", []byte{}, "", []byte(nil), uint8(2))
	f.Add("bin", []byte{0xff, 0x00, 0xfe}, "clé", []byte("ключ"), uint8(3))
	f.Add("bad\xff", []byte("v"), "ok", []byte("w"), uint8(0))
	f.Fuzz(func(t *testing.T, n1 string, v1 []byte, n2 string, v2 []byte, shape uint8) {
		var hs []headercodec.Header
		switch shape % 4 {
		case 0:
			hs = []headercodec.Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}}
		case 1: // duplicates in a given order
			hs = []headercodec.Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}, {Name: n1, Value: v2}}
		case 2:
			hs = []headercodec.Header{{Name: n2, Value: v1}}
		case 3:
			hs = nil
		}
		src := headercodec.Encode([]byte("prefix"), hs)[len("prefix"):]
		if len(src) != headercodec.EncodedLen(hs) {
			t.Fatalf("Encode wrote %d bytes, EncodedLen says %d", len(src), headercodec.EncodedLen(hs))
		}
		validNames := true
		for _, h := range hs {
			validNames = validNames && utf8.ValidString(h.Name)
		}
		got, err := headercodec.Decode(src, nil)
		if !validNames {
			if err == nil || !errors.Is(err, headercodec.ErrCorrupt) {
				t.Fatalf("invalid name decoded without error: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", hs, err)
		}
		if !equalHeaders(got, hs) {
			t.Fatalf("round trip = %q, want %q", got, hs)
		}
	})
}
