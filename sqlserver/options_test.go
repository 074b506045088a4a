package sqlserver

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	_ "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
)

// openUnreachable returns a *sql.DB that is never connected: construction and
// argument checks need no server.
func openUnreachable(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlserver", "sqlserver://sa:x@127.0.0.1:1?database=none&dial+timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMaxTablePrefix(t *testing.T) {
	if got, want := longestSuffix(), "outbox_df_message_uuid"; got != want {
		t.Fatalf("longest suffix %q, want %q", got, want)
	}
	if want := MaxIdentifierUnits - utf16Len(longestSuffix()); MaxTablePrefixUnits != want {
		t.Fatalf("MaxTablePrefixUnits = %d, computed from the names %d", MaxTablePrefixUnits, want)
	}
	// At the limit every generated name fits exactly or with room.
	o := outbox.Options{TablePrefix: strings.Repeat("p", MaxTablePrefixUnits)}
	for _, name := range newNames(o).all() {
		if n := utf16Len(name); n > MaxIdentifierUnits {
			t.Errorf("%q is %d units", name, n)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	emoji := "\U0001F600" // two UTF-16 code units
	ok := []outbox.Options{
		{},
		{Schema: "messaging", TablePrefix: "orders_", Lanes: 1},
		{TablePrefix: strings.Repeat("p", 106)},
		{TablePrefix: strings.Repeat(emoji, 53)},
		{TablePrefix: strings.Repeat("é", 106)}, // BMP: one unit each
		{Schema: strings.Repeat("s", 128)},
		{Schema: strings.Repeat(emoji, 64)},
		{Schema: "a]b'c", TablePrefix: "x]'[_"},
		{Lanes: outbox.LanesMax},
	}
	for _, o := range ok {
		if _, err := validateOptions(o); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	bad := []struct {
		opts     outbox.Options
		contains []string
	}{
		{outbox.Options{TablePrefix: strings.Repeat("p", 107)}, []string{"TablePrefix", "107 UTF-16 code units", "at most 106", "outbox_df_message_uuid"}},
		{outbox.Options{TablePrefix: strings.Repeat(emoji, 54)}, []string{"TablePrefix", "108 UTF-16 code units"}},
		{outbox.Options{Schema: strings.Repeat("s", 129)}, []string{"Schema", "129 UTF-16 code units", "128"}},
		{outbox.Options{Schema: strings.Repeat(emoji, 65)}, []string{"Schema", "130 UTF-16 code units"}},
		{outbox.Options{Schema: "   "}, []string{"Schema", "blank"}},
		{outbox.Options{TablePrefix: "a\x00b"}, []string{"TablePrefix", "NUL"}},
		{outbox.Options{Schema: "a\x00b"}, []string{"Schema", "NUL"}},
		{outbox.Options{TablePrefix: "a\xffb"}, []string{"TablePrefix", "UTF-8"}},
		{outbox.Options{Schema: "\xc3"}, []string{"Schema", "UTF-8"}},
		{outbox.Options{Lanes: -1}, []string{"Lanes"}},
		{outbox.Options{Lanes: outbox.LanesMax + 1}, []string{"Lanes"}},
	}
	for _, c := range bad {
		_, err := validateOptions(c.opts)
		if !errors.Is(err, outbox.ErrInvalidOptions) {
			t.Errorf("%.60q: error %v does not wrap ErrInvalidOptions", c.opts.TablePrefix+"|"+c.opts.Schema, err)
			continue
		}
		for _, s := range c.contains {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q lacks %q", err, s)
			}
		}
		// New and CreateScript refuse the same options.
		if _, nerr := New(openUnreachable(t), c.opts); !errors.Is(nerr, outbox.ErrInvalidOptions) {
			t.Errorf("New accepted %+v: %v", c.opts, nerr)
		}
		if _, serr := CreateScript(c.opts); !errors.Is(serr, outbox.ErrInvalidOptions) {
			t.Errorf("CreateScript accepted %+v: %v", c.opts, serr)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	s, err := New(openUnreachable(t), outbox.Options{TablePrefix: "x_"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Options(); got.Lanes != outbox.LanesDefault || got.TablePrefix != "x_" || got.Schema != "" {
		t.Fatalf("Options() = %+v", got)
	}
	if _, err := New(nil, outbox.Options{}); err == nil {
		t.Fatal("New(nil db) succeeded")
	}
}

func TestQualifiedTable(t *testing.T) {
	if got := QualifiedTable(outbox.Options{}, "outbox"); got != "[dbo].[outbox]" {
		t.Errorf("default schema: %s", got)
	}
	o := outbox.Options{Schema: "m]s", TablePrefix: "p]_"}
	if got := QualifiedTable(o, o.LanesTable()); got != "[m]]s].[p]]_outbox_lanes]" {
		t.Errorf("quoted: %s", got)
	}
}
