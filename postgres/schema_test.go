package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/postgres"
)

func TestCreateScriptOptions(t *testing.T) {
	ok := strings.Repeat("p", postgres.MaxTablePrefixBytes)
	for _, tc := range []struct {
		name  string
		opts  outbox.Options
		field string // "" = valid
	}{
		{"defaults", outbox.Options{}, ""},
		{"longest prefix", outbox.Options{TablePrefix: ok}, ""},
		{"prefix one byte too long", outbox.Options{TablePrefix: ok + "p"}, "TablePrefix"},
		// Bytes, not characters: 24 two-byte characters are 48 bytes.
		{"multibyte prefix", outbox.Options{TablePrefix: strings.Repeat("é", postgres.MaxTablePrefixBytes/2+1)}, "TablePrefix"},
		{"supplementary characters fit by bytes", outbox.Options{TablePrefix: strings.Repeat("😀", postgres.MaxTablePrefixBytes/4)}, ""},
		{"schema 63 bytes", outbox.Options{Schema: strings.Repeat("s", 63)}, ""},
		{"schema 64 bytes", outbox.Options{Schema: strings.Repeat("s", 64)}, "Schema"},
		{"NUL in prefix", outbox.Options{TablePrefix: "a\x00"}, "TablePrefix"},
		{"NUL in schema", outbox.Options{Schema: "a\x00"}, "Schema"},
		{"invalid UTF-8", outbox.Options{TablePrefix: "\xff"}, "TablePrefix"},
		{"lanes", outbox.Options{Lanes: outbox.LanesMax + 1}, "Lanes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script, err := postgres.CreateScript(tc.opts)
			_, nerr := postgres.New(nil, tc.opts)
			if tc.field == "" {
				if err != nil || script == "" {
					t.Fatalf("CreateScript = %v", err)
				}
				return
			}
			if !errors.Is(err, outbox.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("CreateScript error = %v; want ErrInvalidOptions naming %s", err, tc.field)
			}
			if nerr == nil {
				t.Fatal("New accepted invalid options")
			}
		})
	}
}

func TestCreateScriptShape(t *testing.T) {
	script, err := postgres.CreateScript(outbox.Options{TablePrefix: `a"b_`})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(script, "CREATE SCHEMA") {
		t.Error("schema created without Options.Schema")
	}
	for _, want := range []string{`"a""b_outbox"`, `"a""b_outbox_lanes"`, `"a""b_outbox_nodes"`, `"a""b_outbox_lseq_ix"`, `"a""b_outbox_due_ix"`} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %s", want)
		}
	}
	for _, line := range strings.Split(script, ";\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(line, "IF NOT EXISTS") {
			t.Errorf("statement is not idempotent: %s", line)
		}
	}
	script, err = postgres.CreateScript(outbox.Options{Schema: `s"x`, TablePrefix: "p_"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, `CREATE SCHEMA IF NOT EXISTS "s""x";`) || !strings.Contains(script, `"s""x"."p_outbox"`) {
		t.Errorf("schema not quoted/qualified:\n%s", script)
	}
}

// TestCreateSchemaInSchema deploys into a quoted schema twice (idempotent), with the
// longest prefix, and uses the store through it.
func TestCreateSchemaInSchema(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	schema := `S"` + testenv.Prefix(t)
	testenv.Cleanup(t, "drop schema "+schema, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+strings.ReplaceAll(schema, `"`, `""`)+`" CASCADE`)
		return err
	})
	prefix := testenv.Prefix(t)
	prefix += strings.Repeat("x", postgres.MaxTablePrefixBytes-len(prefix))
	opts := outbox.Options{Schema: schema, TablePrefix: prefix, Lanes: 4}
	s := newStore(t, db, opts)
	if err := s.CreateSchema(context.Background()); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	// Every generated name must exist untruncated.
	var n int
	err := db.QueryRow(`SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname LIKE $2 || '%'`, schema, prefix).Scan(&n)
	if err != nil || n < 7 { // 3 tables + 4 indexes (plus the primary keys)
		t.Fatalf("relations in schema = %d, %v", n, err)
	}
	insert(t, db, s, rec(base, "", 4))
	if c, err := s.Count(context.Background(), base); err != nil || c != 1 {
		t.Fatalf("Count = %d, %v", c, err)
	}
}
