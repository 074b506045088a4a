package dashboard

import (
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
)

func testHandler(t testing.TB) *Handler {
	t.Helper()
	c := Config{}
	c.setDefaults()
	return &Handler{config: c, now: time.Now}
}

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
		cut  bool
	}{
		{"abc", 5, "abc", false},
		{"abcdef", 3, "abc", true},
		{"aé", 2, "a", true}, // é is two bytes: not split
		{"\xff<b>", 10, "\uFFFD<b>", false},
		{"日本語", 4, "日", true},
	} {
		got, cut := clip(c.in, c.max)
		if got != c.want || cut != c.cut {
			t.Errorf("clip(%q, %d) = %q, %v; want %q, %v", c.in, c.max, got, cut, c.want, c.cut)
		}
	}
}

func TestPreview(t *testing.T) {
	h := testHandler(t)
	for _, c := range []struct {
		body []byte
		kind string
		want string
	}{
		{nil, "empty", ""},
		{[]byte(`{"a":[1,2]}`), "json", "{\n  \"a\": [\n    1,\n    2\n  ]\n}"},
		{[]byte("hello\nworld"), "text", "hello\nworld"},
		{[]byte("a\x00b"), "hex", hex.Dump([]byte("a\x00b"))},
		{[]byte("\xff\xfe"), "hex", hex.Dump([]byte("\xff\xfe"))},
	} {
		p := h.preview(c.body)
		if p.Kind != c.kind || p.Text != c.want {
			t.Errorf("preview(%q) = %s %q; want %s %q", c.body, p.Kind, p.Text, c.kind, c.want)
		}
	}
	big := []byte(strings.Repeat("é", 10<<20))
	p := h.preview(big)
	if p.Kind != "text" || !p.Cut || len(p.Text) > h.config.PreviewBytes || !utf8.ValidString(p.Text) {
		t.Errorf("10 MB text preview: %s, cut %v, %d bytes", p.Kind, p.Cut, len(p.Text))
	}
}

func TestPredecessor(t *testing.T) {
	if _, ok := predecessor(outbox.ID{}); ok {
		t.Error("the zero id has a predecessor")
	}
	id := outbox.ID{15: 0, 14: 1}
	prev, _ := predecessor(id)
	if want := (outbox.ID{15: 0xff}); prev != want || prev.Compare(id) >= 0 {
		t.Errorf("predecessor(%x) = %x", id, prev)
	}
}

func TestRate(t *testing.T) {
	h := testHandler(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if r := h.sample(t0, 1000); r.Valid {
		t.Errorf("one sample gives a rate: %+v", r)
	}
	h.sample(t0.Add(time.Second), 990) // closer than sampleSpacing: not kept
	r := h.sample(t0.Add(30*time.Second), 700)
	if !r.Valid || r.DrainPerMin != 600 || r.Samples != 2 {
		t.Errorf("300 rows fewer in 30 s: %+v, want 600/min over 2 samples", r)
	}
	r = h.sample(t0.Add(h.config.RateWindow+10*time.Second), 700)
	if r.Samples != 2 || r.DrainPerMin != 0 {
		t.Errorf("samples older than the window are dropped: %+v", r)
	}
}

func TestParseFilter(t *testing.T) {
	for _, bad := range []string{"age=5x", "age=-1h", "after=nope"} {
		v, _ := urlValues(bad)
		if _, err := parseFilter(v); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	v, _ := urlValues("age=3d&topic=t&key=k&error=E")
	f, err := parseFilter(v)
	if err != nil || f.MinAge != 72*time.Hour || f.Describe() != `topic contains "t", ordering key "k", error contains "E", older than "3d"` {
		t.Errorf("parseFilter: %+v %v %q", f, err, f.Describe())
	}
}

// FuzzPreview: any payload gives a bounded, valid UTF-8 preview; any stored text a
// bounded, valid UTF-8 clip.
func FuzzPreview(f *testing.F) {
	h := testHandler(f)
	for _, s := range []string{"", "{}", `{"a":"<script>"}`, "\xff", "plain", "a\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := h.preview(b)
		if !utf8.ValidString(p.Text) || len(p.Text) > 5*h.config.PreviewBytes {
			t.Fatalf("preview of %q: %d bytes, valid %v", b, len(p.Text), utf8.ValidString(p.Text))
		}
		s, _ := clip(string(b), 16)
		if !utf8.ValidString(s) || len(s) > 16+2*len("\uFFFD")*16 {
			t.Fatalf("clip of %q = %q", b, s)
		}
	})
}

// FuzzFilter: any query parses or fails with a message, never panics.
func FuzzFilter(f *testing.F) {
	f.Add("age=3d&topic=x")
	f.Add("after=01ARZ3NDEKTSV4RRFFQ69G5FAV&age=90s")
	f.Fuzz(func(t *testing.T, q string) {
		v, err := urlValues(q)
		if err != nil {
			return
		}
		if f, err := parseFilter(v); err == nil {
			_ = f.Describe()
			_ = f.Query().Encode()
		}
	})
}

func urlValues(q string) (map[string][]string, error) { return url.ParseQuery(q) }
