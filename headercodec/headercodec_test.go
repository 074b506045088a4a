package headercodec_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/headercodec"
)

// unhex decodes hex with spaces between groups, for readable vectors.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad test vector %q: %v", s, err)
	}
	return b
}

// golden vectors pin the wire format: version 1 and count, then per entry length+name and
// length+value, every integer a little-endian uint32.
var golden = []struct {
	name    string
	headers []headercodec.Header
	hex     string
}{
	{
		name:    "empty",
		headers: nil,
		hex:     "01000000 00000000",
	},
	{
		name:    "one entry",
		headers: []headercodec.Header{{Name: "a", Value: []byte("b")}},
		hex:     "01000000 01000000  01000000 61  01000000 62",
	},
	{
		name: "duplicate names keep their order",
		headers: []headercodec.Header{
			{Name: "k", Value: []byte("2")},
			{Name: "k", Value: []byte("1")},
			{Name: "a", Value: []byte("0")},
		},
		hex: "01000000 03000000" +
			" 01000000 6b 01000000 32" +
			" 01000000 6b 01000000 31" +
			" 01000000 61 01000000 30",
	},
	{
		name: "empty values and an empty name",
		headers: []headercodec.Header{
			{Name: "x", Value: nil},
			{Name: "", Value: []byte{}},
		},
		hex: "01000000 02000000  01000000 78 00000000  00000000 00000000",
	},
	{
		name:    "non-UTF-8 value bytes",
		headers: []headercodec.Header{{Name: "bin", Value: []byte{0xff, 0xfe, 0x00, 0x80}}},
		hex:     "01000000 01000000  03000000 62696e  04000000 fffe0080",
	},
	{
		name:    "multi-byte UTF-8 name",
		headers: []headercodec.Header{{Name: "clé", Value: []byte("v")}},
		hex:     "01000000 01000000  04000000 636cc3a9  01000000 76",
	},
}

func equalHeaders(a, b []headercodec.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func TestGolden(t *testing.T) {
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			want := unhex(t, g.hex)
			got := headercodec.Encode(nil, g.headers)
			if !bytes.Equal(got, want) {
				t.Fatalf("Encode =\n%x\nwant\n%x", got, want)
			}
			if n := headercodec.EncodedLen(g.headers); n != len(want) {
				t.Fatalf("EncodedLen = %d, want %d", n, len(want))
			}
			// Encode appends: an existing prefix stays.
			if got := headercodec.Encode([]byte("pre"), g.headers); !bytes.Equal(got, append([]byte("pre"), want...)) {
				t.Fatalf("Encode with prefix = %x", got)
			}
			if err := headercodec.Validate(want); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			dec, err := headercodec.Decode(want, nil)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !equalHeaders(dec, g.headers) {
				t.Fatalf("Decode = %q, want %q", dec, g.headers)
			}
		})
	}
}

func TestEmptyIsExactlyEightBytes(t *testing.T) {
	for _, hs := range [][]headercodec.Header{nil, {}} {
		got := headercodec.Encode(nil, hs)
		if want := []byte{1, 0, 0, 0, 0, 0, 0, 0}; !bytes.Equal(got, want) {
			t.Fatalf("Encode(%#v) = %x, want %x", hs, got, want)
		}
	}
	if got := headercodec.EncodeMetadata(nil, nil); !bytes.Equal(got, []byte{1, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("EncodeMetadata(nil) = %x", got)
	}
	md, err := headercodec.DecodeMetadata([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	if err != nil || md == nil || len(md) != 0 {
		t.Fatalf("DecodeMetadata(empty) = %#v, %v; want empty non-nil map", md, err)
	}
}

// TestDecodedValuesAreCapped guards against an append to a decoded value overwriting the
// next entry in the shared input.
func TestDecodedValuesAreCapped(t *testing.T) {
	src := headercodec.Encode(nil, []headercodec.Header{{Name: "a", Value: []byte("1")}, {Name: "b", Value: []byte("2")}})
	hs, err := headercodec.Decode(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(hs[0].Value, 'X')
	again, err := headercodec.Decode(src, nil)
	if err != nil || again[1].Name != "b" {
		t.Fatalf("input changed by append to a decoded value: %q, %v", again, err)
	}
}

var decodeErrors = []struct {
	name string
	hex  string
	msg  string
}{
	{"empty input", "", "0 bytes is shorter than the 8-byte prefix"},
	{"shorter than the prefix", "01000000 000000", "7 bytes is shorter than the 8-byte prefix"},
	{"unknown version", "02000000 00000000", "unknown version 2 (want 1)"},
	{"version zero", "00000000 00000000", "unknown version 0 (want 1)"},
	{"count that cannot fit", "01000000 02000000 00000000 00000000", "count 2 cannot fit in 8 remaining bytes"},
	{"count 2^31 in 12 bytes", "01000000 00000080 00000000", "count 2147483648 cannot fit in 4 remaining bytes"},
	{"count 2^32-1", "01000000 ffffffff", "count 4294967295 cannot fit in 0 remaining bytes"},
	{"name length past the end", "01000000 01000000 09000000 61626364", "entry 0: name length 9 past the end (4 bytes left)"},
	{"name length word past the end", "01000000 02000000 04000000 61626364 04000000 65666768", "entry 1: name length past the end (0 bytes left, need 4)"},
	{"value length past the end", "01000000 01000000 01000000 61 05000000 62", "entry 0: value length 5 past the end (1 bytes left)"},
	{"value length word past the end", "01000000 01000000 05000000 6162636465", "entry 0: value length past the end (0 bytes left, need 4)"},
	{"huge name length", "01000000 01000000 ffffffff 00000000", "entry 0: name length 4294967295 past the end (4 bytes left)"},
	{"invalid UTF-8 name", "01000000 01000000 02000000 c328 00000000", "entry 0: name is not valid UTF-8"},
	{"invalid UTF-8 in second name", "01000000 02000000 01000000 61 00000000 01000000 ff 00000000", "entry 1: name is not valid UTF-8"},
	{"trailing bytes", "01000000 00000000 00", "1 trailing bytes after 0 entries"},
	{"trailing bytes after entries", "01000000 01000000 01000000 61 01000000 62 0000", "2 trailing bytes after 1 entries"},
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range decodeErrors {
		t.Run(c.name, func(t *testing.T) {
			src := unhex(t, c.hex)
			check := func(fn string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s(%x) succeeded, want error %q", fn, src, c.msg)
				}
				if !errors.Is(err, headercodec.ErrCorrupt) {
					t.Errorf("%s error %q does not wrap ErrCorrupt", fn, err)
				}
				if !strings.Contains(err.Error(), c.msg) {
					t.Errorf("%s error = %q, want it to say %q", fn, err, c.msg)
				}
			}
			hs, err := headercodec.Decode(src, make([]headercodec.Header, 3))
			check("Decode", err)
			if len(hs) != 0 {
				t.Errorf("Decode returned %d entries with its error", len(hs))
			}
			check("Validate", headercodec.Validate(src))
			md, err := headercodec.DecodeMetadata(src)
			check("DecodeMetadata", err)
			if md != nil {
				t.Errorf("DecodeMetadata returned %v with its error", md)
			}
		})
	}
}

// TestHostileCountFailsFast: a 12-byte input claiming 2^31 entries must be rejected
// before anything is sized by the count.
func TestHostileCountFailsFast(t *testing.T) {
	src := unhex(t, "01000000 00000080 00000000")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := headercodec.Decode(src, nil); err == nil {
			t.Fatal("Decode accepted 2^31 entries in 12 bytes")
		}
	})
	// Only the error value and its message are allocated.
	if allocs > 4 {
		t.Errorf("Decode of a hostile count made %v allocations, want <= 4", allocs)
	}
	var before, after runtime.MemStats
	const runs = 100
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		_, _ = headercodec.Decode(src, nil)
		_, _ = headercodec.DecodeMetadata(src)
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 1024 {
		t.Errorf("hostile count allocated %d bytes per decode, want < 1 KiB", perRun)
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	src := headercodec.Encode(nil, makeHeaders(4096))
	if allocs := testing.AllocsPerRun(100, func() {
		if err := headercodec.Validate(src); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("Validate made %v allocations, want 0", allocs)
	}
}

// TestDecodeIntoReusedSliceAllocatesOnlyNames: all names share one string, so a decode
// into a slice with room costs one allocation (none without names), whatever the count.
func TestDecodeIntoReusedSliceAllocatesOnlyNames(t *testing.T) {
	for _, size := range []int{256, 4096} {
		hs := makeHeaders(size)
		src := headercodec.Encode(nil, hs)
		dst := make([]headercodec.Header, 0, len(hs))
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			dst, err = headercodec.Decode(src, dst)
			if err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 || allocs > float64(len(hs)) {
			t.Errorf("%d B, %d entries: Decode into a reused slice made %v allocations, want <= 1", size, len(hs), allocs)
		}
		if !equalHeaders(dst, hs) {
			t.Fatalf("%d B: decoded %q, want %q", size, dst, hs)
		}
	}
	// Only empty names: nothing to allocate at all.
	src := headercodec.Encode(nil, []headercodec.Header{{Value: []byte("v")}, {}})
	dst := make([]headercodec.Header, 0, 2)
	if allocs := testing.AllocsPerRun(100, func() { dst, _ = headercodec.Decode(src, dst) }); allocs != 0 {
		t.Errorf("Decode of empty names made %v allocations, want 0", allocs)
	}
}

func TestDecodeReusesAndResetsDst(t *testing.T) {
	src := headercodec.Encode(nil, []headercodec.Header{{Name: "a", Value: []byte("1")}})
	dst := []headercodec.Header{{Name: "old"}, {Name: "older"}}
	got, err := headercodec.Decode(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "a" || &got[0] != &dst[0] {
		t.Fatalf("Decode did not reuse dst[:0]: %q", got)
	}
}

func TestMetadataSortedByName(t *testing.T) {
	md := message.Metadata{"b": "2", "a": "1", "c": "", "é": "\xff", "A": "upper"}
	want := headercodec.Encode(nil, []headercodec.Header{
		{Name: "A", Value: []byte("upper")},
		{Name: "a", Value: []byte("1")},
		{Name: "b", Value: []byte("2")},
		{Name: "c", Value: []byte("")},
		{Name: "é", Value: []byte("\xff")},
	})
	for i := 0; i < 50; i++ { // map order is random per iteration: equal maps, equal bytes
		copyMD := message.Metadata{}
		for k, v := range md {
			copyMD[k] = v
		}
		if got := headercodec.EncodeMetadata(nil, copyMD); !bytes.Equal(got, want) {
			t.Fatalf("EncodeMetadata = %x, want %x", got, want)
		}
	}
	back, err := headercodec.DecodeMetadata(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(md) {
		t.Fatalf("DecodeMetadata = %v, want %v", back, md)
	}
	for k, v := range md {
		if back[k] != v {
			t.Fatalf("DecodeMetadata[%q] = %q, want %q", k, back[k], v)
		}
	}
}

func TestDecodeMetadataLastDuplicateWins(t *testing.T) {
	src := headercodec.Encode(nil, []headercodec.Header{
		{Name: "k", Value: []byte("first")},
		{Name: "k", Value: []byte("last")},
	})
	md, err := headercodec.DecodeMetadata(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(md) != 1 || md["k"] != "last" {
		t.Fatalf("DecodeMetadata = %v, want k=last", md)
	}
}

func TestEncodeInvalidNameIsCaughtByValidate(t *testing.T) {
	src := headercodec.Encode(nil, []headercodec.Header{{Name: "bad\xff", Value: []byte("v")}})
	if err := headercodec.Validate(src); err == nil || !strings.Contains(err.Error(), "name is not valid UTF-8") {
		t.Fatalf("Validate = %v, want the invalid name reported", err)
	}
}

func ExampleEncodeMetadata() {
	b := headercodec.EncodeMetadata(nil, message.Metadata{"trace": "t1", "content-type": "json"})
	fmt.Printf("%d bytes\n", len(b))
	hs, _ := headercodec.Decode(b, nil)
	for _, h := range hs {
		fmt.Printf("%s=%s\n", h.Name, h.Value)
	}
	// Output:
	// 47 bytes
	// content-type=json
	// trace=t1
}

// makeHeaders returns Kafka/AMQP-like headers whose encoding is exactly size bytes.
func makeHeaders(size int) []headercodec.Header {
	var hs []headercodec.Header
	for i := 0; ; i++ {
		h := headercodec.Header{
			Name:  fmt.Sprintf("x-header-%02d", i),
			Value: []byte(strings.Repeat(string(rune('a'+i%26)), 20)),
		}
		need := size - headercodec.EncodedLen(hs)
		if entry := 8 + len(h.Name) + len(h.Value); need < 2*entry {
			// Last entry: pad or trim its value so the total is exact.
			h.Value = []byte(strings.Repeat("z", need-8-len(h.Name)))
			return append(hs, h)
		}
		hs = append(hs, h)
	}
}

func TestMakeHeadersSizes(t *testing.T) {
	for _, size := range []int{256, 4096} {
		if n := headercodec.EncodedLen(makeHeaders(size)); n != size {
			t.Fatalf("makeHeaders(%d) encodes to %d bytes", size, n)
		}
	}
}
