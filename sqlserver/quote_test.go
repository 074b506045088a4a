package sqlserver

import (
	"slices"
	"testing"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
)

var quoteSeeds = []string{
	"", "outbox", "a]b", "]", "]]", "[", "[x]", "x'y", "'", "''", "a.b", "dbo].[x",
	"x]; DROP TABLE t; --", "N'", "é✓", "😀", " lead and trail ", "\n\t", "\"q\"",
}

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{
		"outbox":      "[outbox]",
		"a]b":         "[a]]b]",
		"]":           "[]]]",
		"[x]":         "[[x]]]",
		"x'y":         "[x'y]",
		"a.b":         "[a.b]",
		"x]; DROP --": "[x]]; DROP --]",
		"":            "[]",
	} {
		if got := quoteIdent(in); got != want {
			t.Errorf("quoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestQuoteString(t *testing.T) {
	for in, want := range map[string]string{
		"outbox":        "N'outbox'",
		"x'y":           "N'x''y'",
		"'":             "N''''",
		"[dbo].[a]]b]":  "N'[dbo].[a]]b]'",
		"":              "N''",
		"'); DROP x --": "N'''); DROP x --'",
	} {
		if got := quoteString(in); got != want {
			t.Errorf("quoteString(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzQuoteIdent: for any input the quoted identifier reads back as exactly the input
// and ends where quoteIdent ends it, so nothing after it can be smuggled in.
func FuzzQuoteIdent(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := quoteIdent(s)
		name, rest, err := parseBracket(q + " AND 1=1")
		if err != nil {
			t.Fatalf("quoteIdent(%q) = %s does not parse: %v", s, q, err)
		}
		if name != s || rest != " AND 1=1" {
			t.Fatalf("quoteIdent(%q) = %s reads back as %q with rest %q", s, q, name, rest)
		}
	})
}

// FuzzQuoteString: the same for N'...' literals.
func FuzzQuoteString(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := quoteString(s)
		v, rest, err := parseNString(q + ", N'U')")
		if err != nil {
			t.Fatalf("quoteString(%q) = %s does not parse: %v", s, q, err)
		}
		if v != s || rest != ", N'U')" {
			t.Fatalf("quoteString(%q) = %s reads back as %q with rest %q", s, q, v, rest)
		}
	})
}

// FuzzNames: for any valid schema and prefix, (1) the qualified name inside an N”
// literal (as OBJECT_ID gets it) reads back as the two exact parts, (2) go-mssqldb's
// bulk copy keeps the name CopyIn gets, and (3) the whole create script and every
// statement of the store have the same token structure as with plain names: names
// change only the insides of identifiers and literals.
func FuzzNames(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add("msg", s)
		f.Add(s, "p_")
	}
	plain := outbox.Options{Schema: "s", TablePrefix: "p_"}
	plainShapes := scriptShapes(f, plain)
	f.Fuzz(func(t *testing.T, schema, prefix string) {
		opts := outbox.Options{Schema: schema, TablePrefix: prefix}
		if opts, err := validateOptions(opts); err != nil || opts.Schema == "" {
			t.Skip()
		}
		if !utf8.ValidString(schema) || !utf8.ValidString(prefix) {
			t.Fatalf("invalid UTF-8 accepted: %q %q", schema, prefix)
		}
		qualified := QualifiedTable(opts, opts.OutboxTable())
		lit, rest, err := parseNString(quoteString(qualified))
		if err != nil || rest != "" || lit != qualified {
			t.Fatalf("literal of %s reads back as %q, %q, %v", qualified, lit, rest, err)
		}
		s, rest, err := parseBracket(lit)
		if err != nil || s != schema || rest[0] != '.' {
			t.Fatalf("schema part of %s reads back as %q (rest %q, %v)", lit, s, rest, err)
		}
		tbl, rest, err := parseBracket(rest[1:])
		if err != nil || tbl != opts.OutboxTable() || rest != "" {
			t.Fatalf("table part of %s reads back as %q (rest %q, %v)", lit, tbl, rest, err)
		}
		if got, err := quoteObjectName(qualified); err != nil || got != qualified {
			t.Fatalf("go-mssqldb quotes the bulk copy table %s as %s (%v)", qualified, got, err)
		}
		got := scriptShapes(t, opts)
		if len(got) != len(plainShapes) {
			t.Fatalf("%d statements, want %d", len(got), len(plainShapes))
		}
		for i := range got {
			if !slices.Equal(got[i], plainShapes[i]) {
				t.Fatalf("statement %d changes structure with schema %q, prefix %q", i, schema, prefix)
			}
		}
	})
}

// scriptShapes lexes every statement of the create script and of the store's DML.
func scriptShapes(t testing.TB, opts outbox.Options) [][]token {
	t.Helper()
	var out [][]token
	for _, stmt := range append(createStatements(opts), allQueries(newQueries(newNames(opts)))...) {
		toks, err := lex(stmt)
		if err != nil {
			t.Fatalf("lex %q: %v", stmt, err)
		}
		out = append(out, shape(toks))
	}
	return out
}
