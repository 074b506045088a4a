package mysql

import (
	"testing"
	"time"
)

func TestBind(t *testing.T) {
	at, err := timeArg(time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600)))
	if err != nil {
		t.Fatal(err)
	}
	got := bind("SELECT * FROM `a?``b` WHERE s = 'x?' AND k = ? AND t > ? AND n = ? AND e = ? AND b = ? AND z = ?",
		"it's \x00?", at, int64(-7), "", []byte{0xff, 0}, []byte(nil))
	want := "SELECT * FROM `a?``b` WHERE s = 'x?' AND k = X'6974277320003f' AND t > '2026-01-02 02:04:05.123456' AND n = -7 AND e = '' AND b = X'ff00' AND z = NULL"
	if got != want {
		t.Fatalf("bind:\n got %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		q    string
		args []any
	}{
		{"SELECT ?", nil},
		{"SELECT ?", []any{int64(1), int64(2)}},
		{"SELECT ?, ?", []any{int64(1)}},
		{"SELECT ?", []any{1.5}},
	} {
		func() {
			defer func() {
				if recover() == nil && c.args != nil {
					t.Errorf("bind(%q, %v) did not panic", c.q, c.args)
				}
			}()
			_ = bind(c.q, c.args...)
		}()
	}
}
