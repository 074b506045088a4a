package dashboard

import (
	"encoding/hex"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// clip returns stored text as a page shows it: invalid UTF-8 replaced by U+FFFD and
// cut to at most max bytes (on a rune boundary). cut reports whether it was cut.
func clip(s string, max int) (text string, cut bool) {
	if len(s) > max {
		i := max
		for i > 0 && i > max-utf8.UTFMax && !utf8.RuneStart(s[i]) {
			i-- // do not split a rune
		}
		s, cut = s[:i], true
	}
	return strings.ToValidUTF8(s, "\uFFFD"), cut
}

// shown is a clipped text with its original size, for templates.
type shown struct {
	Text  string
	Cut   bool
	Bytes int
}

func (h *Handler) show(s string) shown {
	t, cut := clip(s, h.config.FieldBytes)
	return shown{Text: t, Cut: cut, Bytes: len(s)}
}

// showBytes shows a raw value: as text when it is valid UTF-8, else as hex.
func (h *Handler) showBytes(b []byte) (shown, bool) {
	if utf8.Valid(b) {
		return h.show(string(b)), false
	}
	n := min(len(b), h.config.FieldBytes/2)
	return shown{Text: hex.EncodeToString(b[:n]), Cut: n < len(b), Bytes: len(b)}, true
}

// count formats n with thousands separators: 1,234,567.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// age formats a duration for people: 45s, 12m30s, 3h05m, 2d04h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

var funcs = template.FuncMap{
	"count": count,
	"age":   age,
	"stamp": stamp,
	"int":   func(n int) string { return count(int64(n)) },
	"list":  func(s ...string) []string { return s },
}
