package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	mssql "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/dsn"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// target is an open store and what is needed to explain its errors.
type target struct {
	o     *opts
	db    *sql.DB
	store outbox.Store
}

func (t *target) Close() { t.db.Close() }

// where names the database for messages: dialect and redacted DSN.
func (o *opts) where() string { return o.dialect + " " + dsn.Redact(o.dsn) }

// scrub removes the DSN's password from a message (drivers are careful, wrapped errors
// may not be).
func (o *opts) scrub(err error) string { return dsn.Scrub(err.Error(), o.dsn) }

func driverName(dialect string) string {
	switch dialect {
	case "postgres":
		return "pgx"
	case "sqlserver":
		return "sqlserver"
	}
	return "mysql"
}

func newStore(db *sql.DB, o *opts) (outbox.Store, error) {
	switch o.dialect {
	case "postgres":
		return postgres.New(db, o.options())
	case "sqlserver":
		return sqlserver.New(db, o.options())
	}
	return mysql.New(db, o.options())
}

func qualified(o *opts, table string) string {
	switch o.dialect {
	case "postgres":
		return postgres.QualifiedTable(o.options(), table)
	case "sqlserver":
		return sqlserver.QualifiedTable(o.options(), table)
	}
	return mysql.QualifiedTable(o.options(), table)
}

// connect opens the database, checks that it answers and, unless creating the schema,
// that the outbox tables exist.
func connect(ctx context.Context, o *opts, wantTables bool) (*target, error) {
	db, err := sql.Open(driverName(o.dialect), o.dsn)
	if err != nil {
		return nil, fmt.Errorf("bad DSN for %s (%s): %s", o.dialect, dsn.Redact(o.dsn), o.scrub(err))
	}
	db.SetMaxOpenConns(4)
	store, err := newStore(db, o)
	if err != nil {
		db.Close()
		return nil, err // an option error, naming the field; no DSN in it
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		host := dsn.Host(o.dsn)
		if host == "" {
			host = "the server"
		}
		return nil, fmt.Errorf("cannot connect to %s at %s (DSN %s): %s", o.dialect, host, dsn.Redact(o.dsn), o.scrub(err))
	}
	t := &target{o: o, db: db, store: store}
	if wantTables {
		for _, table := range []string{o.options().OutboxTable(), o.options().LanesTable(), o.options().NodesTable()} {
			if err := t.probe(ctx, table); err != nil {
				db.Close()
				return nil, err
			}
		}
	}
	return t, nil
}

// probe checks that table exists (and is readable) with a query that reads no row.
func (t *target) probe(ctx context.Context, table string) error {
	q := "SELECT COUNT(*) FROM " + qualified(t.o, table) + " WHERE 1 = 0"
	var n int
	if err := t.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return t.explain(ctx, err)
	}
	return nil
}

// explain turns a store or driver error into a message for an operator: a missing table
// says which one and how to create it, and lists the outbox tables that do exist (a wrong
// prefix or schema is the usual cause).
func (t *target) explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if !missingTable(err) {
		return errors.New(t.o.scrub(err))
	}
	o := t.o
	table := qualified(o, o.options().OutboxTable())
	msg := fmt.Sprintf("the outbox tables for prefix %q", o.prefix)
	if o.schema != "" {
		msg += fmt.Sprintf(" in schema %q", o.schema)
	}
	msg += fmt.Sprintf(" do not exist in %s (%s: %s).\n", o.where(), table, t.o.scrub(err))
	if found := t.outboxTables(ctx); len(found) > 0 {
		msg += "  wrong -prefix or -schema? Use the application's values. Outbox tables there, closest first:\n    " +
			strings.Join(found, "\n    ") + "\n"
	}
	msg += fmt.Sprintf("  to create them: outboxctl schema apply -dialect %s%s -prefix %q -dsn ...",
		o.dialect, schemaFlag(o), o.prefix)
	return errors.New(msg)
}

func schemaFlag(o *opts) string {
	if o.schema == "" {
		return ""
	}
	return fmt.Sprintf(" -schema %q", o.schema)
}

// missingTable recognises "no such table" (and "no such schema") errors of each driver.
func missingTable(err error) bool {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1146 || me.Number == 1049 // no such table, no such database
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42P01" || pe.Code == "3F000" // undefined_table, invalid_schema_name
	}
	var se mssql.Error
	if errors.As(err, &se) {
		return se.Number == 208
	}
	var sp *mssql.Error
	if errors.As(err, &sp) && sp != nil {
		return sp.Number == 208
	}
	return false
}

// outboxTables lists the tables whose name ends in "outbox" that are most like the one
// asked for (at most five, closest name first), as "schema.table (-prefix P)", to point
// at a wrong prefix or schema.
func (t *target) outboxTables(ctx context.Context) []string {
	var q string
	var args []any
	switch t.o.dialect {
	case "postgres":
		q = `SELECT table_schema, table_name FROM information_schema.tables
			WHERE table_name LIKE '%outbox' AND table_schema NOT IN ('pg_catalog', 'information_schema')
			LIMIT 1000`
	case "sqlserver":
		q = `SELECT TOP 1000 TABLE_SCHEMA, TABLE_NAME FROM INFORMATION_SCHEMA.TABLES
			WHERE TABLE_NAME LIKE '%outbox'`
	default:
		q = `SELECT table_schema, table_name FROM information_schema.tables
			WHERE table_name LIKE '%outbox' AND table_schema = COALESCE(NULLIF(?, ''), DATABASE())
			LIMIT 1000`
		args = []any{t.o.schema}
	}
	rows, err := t.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil
	}
	defer rows.Close()
	type candidate struct {
		schema, name string
		dist         int
	}
	want := t.o.options().OutboxTable()
	var found []candidate
	for rows.Next() {
		var c candidate
		if rows.Scan(&c.schema, &c.name) != nil {
			return nil
		}
		c.dist = distance(want, c.name)
		if c.schema != t.o.schema && t.o.schema != "" {
			c.dist++
		}
		found = append(found, c)
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].dist != found[j].dist {
			return found[i].dist < found[j].dist
		}
		return found[i].schema+"."+found[i].name < found[j].schema+"."+found[j].name
	})
	var out []string
	for i, c := range found {
		if i == 5 {
			out = append(out, fmt.Sprintf("... and %d more", len(found)-5))
			break
		}
		out = append(out, fmt.Sprintf("%s.%s (-schema %q -prefix %q)", c.schema, c.name, c.schema, strings.TrimSuffix(c.name, "outbox")))
	}
	return out
}

// distance is the Levenshtein distance between a and b (bytes; names are short).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
