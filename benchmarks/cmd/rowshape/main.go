// Command rowshape measures what the shape of an outbox row costs an INSERT of 1,000
// rows (one multi-row statement plus its COMMIT, one connection), with the table shapes
// of this library before and after the narrower insert of 2026-12-03 side by side with
// a minimal outbox row (id, topic, payload, metadata; primary key only) and with
// shapes that would be narrower still. The shapes take turns statement by statement
// (the order rotating), so that the machine's load hits all alike; it prints the median
// time of each and its ratio to the minimal row (rate minimal-row time / shape time, as
// outboxbench's publish section reports ours / minimal).
//
//	go run ./cmd/rowshape -db mysql -dsn 'root@tcp(127.0.0.1:3306)/test'
//	go run ./cmd/rowshape -db postgres -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// It creates and drops tables named rowshape_*.
package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// shape is one table and the statement that inserts rows into it.
type shape struct {
	name string
	ddl  []string
	// stmt returns the INSERT of n rows with ids starting at first, and its arguments.
	stmt func(first, n int) (string, []any)
}

var (
	body    = []byte(`{"order_id":"0123456789","customer":"c-42","amount":1999,"currency":"EUR","pad":"` + strings.Repeat("x", 110) + `"}`)
	headers = []byte("\x01\x00\x00\x00\x03\x00\x00\x00\x08\x00\x00\x00trace_id\x10\x00\x00\x000123456789abcdef\x04\x00\x00\x00type\x0d\x00\x00\x00order.created\x01\x00\x00\x00v\x01\x00\x00\x001")
	uuid    = "0b6a7f7e-2a7c-4d3e-9f43-1b2c3d4e5f60"
)

func id(i int) []byte { b := make([]byte, 16); copy(b, fmt.Sprintf("%016d", i)); return b }

func main() {
	db := flag.String("db", "mysql", "mysql or postgres")
	dsn := flag.String("dsn", "", "DSN (default: OUTBOX_TEST_MYSQL_DSN or OUTBOX_TEST_POSTGRES_DSN)")
	rounds := flag.Int("rounds", 60, "statements per shape")
	rows := flag.Int("rows", 1000, "rows per statement")
	flag.Parse()
	if *dsn == "" {
		*dsn = os.Getenv(map[string]string{"mysql": "OUTBOX_TEST_MYSQL_DSN", "postgres": "OUTBOX_TEST_POSTGRES_DSN"}[*db])
	}
	var shapes []shape
	driver := "mysql"
	switch *db {
	case "mysql":
		shapes = mysqlShapes()
	case "postgres":
		shapes, driver = postgresShapes(), "pgx"
	default:
		fmt.Fprintln(os.Stderr, "rowshape: -db is mysql or postgres")
		os.Exit(2)
	}
	if err := run(context.Background(), driver, *dsn, shapes, *rounds, *rows); err != nil {
		fmt.Fprintln(os.Stderr, "rowshape:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, driver, dsn string, shapes []shape, rounds, n int) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range shapes {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS rowshape_"+s.name)
		for _, d := range s.ddl {
			if _, err := db.ExecContext(ctx, d); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		defer db.ExecContext(context.Background(), "DROP TABLE IF EXISTS rowshape_"+s.name)
	}
	times := make([][]float64, len(shapes))
	next := 1
	for r := 0; r < rounds; r++ {
		for k := range shapes {
			i := (k + r) % len(shapes)
			q, args := shapes[i].stmt(next, n)
			next += n
			t0 := time.Now()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				_ = tx.Rollback()
				return fmt.Errorf("%s: %w", shapes[i].name, err)
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			if r >= 2 { // two warm-up rounds
				times[i] = append(times[i], float64(time.Since(t0).Microseconds()))
			}
		}
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	minimal := med(times[len(shapes)-1])
	fmt.Printf("%-28s %10s %16s\n", "shape", "µs/stmt", "minimal / shape")
	for i, s := range shapes {
		m := med(times[i])
		fmt.Printf("%-28s %10.0f %16.3f\n", s.name, m, minimal/m)
	}
	return nil
}

func hx(b []byte) string { return "X'" + hex.EncodeToString(b) + "'" }

// mysqlRow is the rows table of package mysql, with the given keys and deliver_at
// definition.
func mysqlRow(name, deliver, keys, pk string) string {
	return `CREATE TABLE rowshape_` + name + ` (
    id BINARY(16) NOT NULL, message_uuid VARCHAR(64) NOT NULL DEFAULT '', lane INT ` + map[bool]string{true: "NOT NULL DEFAULT -1", false: "NULL"}[pk != "id"] + `,
    ordering_key VARBINARY(255) NULL, transport VARCHAR(64) NOT NULL DEFAULT '', destination VARCHAR(255) NOT NULL,
    message_type VARCHAR(255) NULL, headers LONGBLOB NOT NULL, body LONGBLOB NOT NULL, tenant_id VARCHAR(64) NULL,
    created_at DATETIME(6) NOT NULL, deliver_at DATETIME(6) ` + deliver + `, attempts INT NOT NULL DEFAULT 0,
    last_error TEXT NULL, status VARCHAR(16) NOT NULL DEFAULT 'pending', claim_token BINARY(16) NULL,
    claim_expires_at DATETIME(6) NULL, PRIMARY KEY (` + pk + `)` + keys + `,
    CHECK (attempts >= 0), CHECK (LENGTH(headers) >= 8), CHECK (status IN ('pending', 'parked'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
}

func mysqlShapes() []shape {
	now := time.Now().UTC().Format("2006-01-02 15:04:05.000000")
	// every: the twelve columns named, as Insert did before; named: only the columns the
	// rows use, as it does now.
	every := func(name string) func(first, n int) (string, []any) {
		return func(first, n int) (string, []any) {
			var b strings.Builder
			b.WriteString("INSERT INTO rowshape_" + name + " (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at) VALUES ")
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "(%s,%s,NULL,NULL,'',%s,NULL,%s,%s,NULL,'%s','%s')", hx(id(first+i)), hx([]byte(uuid)), hx([]byte("orders")), hx(headers), hx(body), now, now)
			}
			return b.String(), nil
		}
	}
	named := func(name string) func(first, n int) (string, []any) {
		return func(first, n int) (string, []any) {
			var b strings.Builder
			b.WriteString("INSERT INTO rowshape_" + name + " (id, message_uuid, destination, headers, body, created_at) VALUES ")
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "(%s,%s,%s,%s,%s,'%s')", hx(id(first+i)), hx([]byte(uuid)), hx([]byte("orders")), hx(headers), hx(body), now)
			}
			return b.String(), nil
		}
	}
	// bare: neither created_at (the server's clock fills it) nor, with inHeaders, the
	// message UUID (carried in the headers blob instead): a row as wide as the minimal
	// one, the shapes that show what a narrower row model would buy.
	bare := func(name string, inHeaders bool) func(first, n int) (string, []any) {
		cols, h := "id, message_uuid, destination, headers, body", headers
		if inHeaders {
			cols, h = "id, destination, headers, body", append(slices.Clip(headers), uuid...)
		}
		return func(first, n int) (string, []any) {
			var b strings.Builder
			b.WriteString("INSERT INTO rowshape_" + name + " (" + cols + ") VALUES ")
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				if inHeaders {
					fmt.Fprintf(&b, "(%s,%s,%s,%s)", hx(id(first+i)), hx([]byte("orders")), hx(h), hx(body))
				} else {
					fmt.Fprintf(&b, "(%s,%s,%s,%s,%s)", hx(id(first+i)), hx([]byte(uuid)), hx([]byte("orders")), hx(h), hx(body))
				}
			}
			return b.String(), nil
		}
	}
	serverClock := func(ddl string) string {
		return strings.Replace(ddl, "created_at DATETIME(6) NOT NULL,", "created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),", 1)
	}
	return []shape{
		{"before", []string{mysqlRow("before", "NOT NULL", ", KEY ix_status_lane (status, lane, id), KEY ix_claim_token (claim_token)", "id")}, every("before")},
		{"after_server_clock", []string{serverClock(mysqlRow("after_server_clock", "NOT NULL DEFAULT (created_at)", ", KEY ix_status_lane (status, lane, id)", "id"))}, bare("after_server_clock", false)},
		{"pk_lane_id_server_clock", []string{serverClock(mysqlRow("pk_lane_id_server_clock", "NOT NULL DEFAULT (created_at)", "", "lane, id"))}, bare("pk_lane_id_server_clock", false)},
		{"pk_lane_id_clock_uuid_in_h", []string{serverClock(mysqlRow("pk_lane_id_clock_uuid_in_h", "NOT NULL DEFAULT (created_at)", "", "lane, id"))}, bare("pk_lane_id_clock_uuid_in_h", true)},
		{"after", []string{mysqlRow("after", "NOT NULL DEFAULT (created_at)", ", KEY ix_status_lane (status, lane, id)", "id")}, named("after")},
		{"after_pk_lane_id_no_index", []string{mysqlRow("after_pk_lane_id_no_index", "NOT NULL DEFAULT (created_at)", "", "lane, id")}, named("after_pk_lane_id_no_index")},
		{"minimal", []string{"CREATE TABLE rowshape_minimal (id BINARY(16) NOT NULL PRIMARY KEY, topic VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, metadata BLOB)"},
			func(first, n int) (string, []any) {
				var b strings.Builder
				b.WriteString("INSERT INTO rowshape_minimal (id, topic, payload, metadata) VALUES ")
				for i := range n {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "(%s,%s,%s,%s)", hx(id(first+i)), hx([]byte("orders")), hx(body), hx(headers))
				}
				return b.String(), nil
			}},
	}
}

// postgresRow is the rows table of package postgres with the given indexes.
func postgresRow(name string, indexes ...string) []string {
	t := "rowshape_" + name
	ddl := []string{`CREATE TABLE ` + t + ` (
    id bytea NOT NULL PRIMARY KEY CHECK (octet_length(id) = 16), message_uuid text NOT NULL DEFAULT '',
    lane integer NULL CHECK (lane >= 0), ordering_key text NULL, transport text NOT NULL DEFAULT '',
    destination text NOT NULL, message_type text NULL, headers bytea NOT NULL CHECK (octet_length(headers) >= 8),
    body bytea NOT NULL, tenant_id text NULL, created_at timestamptz NOT NULL, deliver_at timestamptz NOT NULL,
    attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0), last_error text NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'parked')), claim_token bytea NULL,
    claim_expires_at timestamptz NULL,
    CHECK ((claim_token IS NULL AND claim_expires_at IS NULL) OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL))
) WITH (fillfactor = 90)`}
	for _, ix := range indexes {
		ddl = append(ddl, "CREATE INDEX ON "+t+" "+ix)
	}
	return ddl
}

func postgresShapes() []shape {
	now := time.Now().UTC()
	col := func(n int, v any) any {
		switch x := v.(type) {
		case []byte:
			return slices.Repeat([][]byte{x}, n)
		case string:
			return slices.Repeat([]string{x}, n)
		case int32:
			return slices.Repeat([]int32{x}, n)
		case time.Time:
			return slices.Repeat([]time.Time{x}, n)
		}
		panic("rowshape: column type")
	}
	ids := func(first, n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = id(first + i)
		}
		return out
	}
	hot := []string{
		"(lane, id) WHERE status = 'pending' AND lane IS NOT NULL",
		"(id) WHERE status = 'pending' AND lane IS NULL",
		"(id) WHERE status = 'parked'",
		"(ordering_key, id) WHERE status = 'parked'",
	}
	// every: one array per column, as Insert did before; named: the arrays the rows use,
	// deliver_at taken from created_at, as it does now.
	every := func(name string) func(first, n int) (string, []any) {
		return func(first, n int) (string, []any) {
			return `INSERT INTO rowshape_` + name + ` (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at)
SELECT u.id, u.mu, NULLIF(u.lane, -1), NULLIF(u.ok, ''), u.tr, u.dst, NULLIF(u.mt, ''), u.h, u.b, NULLIF(u.tn, ''), u.ca, u.da
FROM unnest($1::bytea[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[], $9::bytea[], $10::text[], $11::timestamptz[], $12::timestamptz[]) AS u(id, mu, lane, ok, tr, dst, mt, h, b, tn, ca, da)`,
				[]any{ids(first, n), col(n, uuid), col(n, int32(-1)), col(n, ""), col(n, ""), col(n, "orders"), col(n, ""), col(n, headers), col(n, body), col(n, ""), col(n, now), col(n, now)}
		}
	}
	named := func(name string) func(first, n int) (string, []any) {
		return func(first, n int) (string, []any) {
			return `INSERT INTO rowshape_` + name + ` (id, message_uuid, destination, headers, body, created_at, deliver_at)
SELECT u.id, u.mu, u.dst, u.h, u.b, u.ca, u.ca FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::timestamptz[]) AS u(id, mu, dst, h, b, ca)`,
				[]any{ids(first, n), col(n, uuid), col(n, "orders"), col(n, headers), col(n, body), col(n, now)}
		}
	}
	return []shape{
		{"before", postgresRow("before", append(hot, "(claim_token) WHERE claim_token IS NOT NULL")...), every("before")},
		{"after", postgresRow("after", hot...), named("after")},
		{"after_no_secondary_index", postgresRow("after_no_secondary_index"), named("after_no_secondary_index")},
		{"minimal", []string{"CREATE TABLE rowshape_minimal (id BYTEA PRIMARY KEY, topic TEXT NOT NULL, payload BYTEA NOT NULL, metadata BYTEA)"},
			func(first, n int) (string, []any) {
				// As outboxbench's minimal contender: a VALUES list with four parameters a row.
				var b strings.Builder
				args := make([]any, 0, 4*n)
				b.WriteString("INSERT INTO rowshape_minimal (id, topic, payload, metadata) VALUES ")
				for i := range n {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "($%d,$%d,$%d,$%d)", 4*i+1, 4*i+2, 4*i+3, 4*i+4)
					args = append(args, id(first+i), "orders", body, headers)
				}
				return b.String(), args
			}},
	}
}
