package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// BenchmarkInsertMethods compares ways of writing a batch at commit, each in a fresh
// transaction that is committed:
//
//   - unnest: the store's Insert (one INSERT ... SELECT FROM unnest of 12 arrays),
//   - values: a hand-written multi-row INSERT with 12 parameters per row (the shape of
//     outboxtest's baseline),
//   - copy: COPY FROM STDIN through pgx's CopyFrom on the raw connection. database/sql
//     gives no raw connection for a *sql.Tx, so the store cannot use it inside the
//     caller's transaction; it is here to size what that costs.
//
// Every iteration runs all three (in rotating order, each into its own table), so load
// on the machine hits them alike: ns/op and ns/row are unnest's; "values-x" and
// "copy-x" are the other methods' times over unnest's.
//
// go test ./postgres -run '^$' -bench InsertMethods -benchmem
func BenchmarkInsertMethods(b *testing.B) {
	db := openDB(b, "")
	ctx := context.Background()
	methods := []string{"unnest", "values", "copy"}
	for _, rows := range []int{1, 8, 64, 1000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			inserts := make([]func(context.Context, []outbox.Record) error, len(methods))
			for m, method := range methods {
				inserts[m] = insertFunc(b, db, newStore(b, db, outbox.Options{Lanes: 64}), method)
			}
			recs := make([]outbox.Record, rows)
			for i := range recs {
				recs[i] = rec(base, fmt.Sprintf("key-%d", i%10), 64)
				recs[i].Body = []byte(strings.Repeat("b", 256))
			}
			var spent [3]time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				for k := range methods {
					m := (n + k) % len(methods)
					b.StopTimer()
					for i := range recs {
						recs[i].ID = outbox.NewID()
					}
					if m == 0 {
						b.StartTimer()
					}
					start := time.Now()
					if err := inserts[m](ctx, recs); err != nil {
						b.Fatalf("%s: %v", methods[m], err)
					}
					spent[m] += time.Since(start)
					if m == 0 {
						b.StopTimer()
					}
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N*rows), "ns/row")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "values-x")
			b.ReportMetric(float64(spent[2])/float64(spent[0]), "copy-x")
		})
	}
}

func insertFunc(b *testing.B, db *sql.DB, s *postgres.Store, method string) func(context.Context, []outbox.Record) error {
	table := postgres.QualifiedTable(s.Options(), s.Options().OutboxTable())
	switch method {
	case "unnest":
		return func(ctx context.Context, recs []outbox.Record) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := s.Insert(ctx, tx, recs); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	case "values":
		var q strings.Builder
		var args []any
		return func(ctx context.Context, recs []outbox.Record) error {
			q.Reset()
			args = args[:0]
			q.WriteString("INSERT INTO " + table + " (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at) VALUES ")
			for i := range recs {
				r := &recs[i]
				if i > 0 {
					q.WriteString(", ")
				}
				n := len(args)
				fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
					n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11, n+12)
				args = append(args, r.ID[:], r.MessageUUID, nullLane(r.Lane), nullText(r.OrderingKey), r.Transport,
					r.Destination, nullText(r.MessageType), r.Headers, r.Body, nullText(r.TenantID), r.CreatedAt, r.CreatedAt)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	case "copy":
		conn, err := db.Conn(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		cols := []string{"id", "message_uuid", "lane", "ordering_key", "transport", "destination", "message_type", "headers", "body", "tenant_id", "created_at", "deliver_at"}
		ident := pgx.Identifier{s.Options().OutboxTable()}
		var rows [][]any
		return func(ctx context.Context, recs []outbox.Record) error {
			rows = rows[:0]
			for i := range recs {
				r := &recs[i]
				rows = append(rows, []any{r.ID[:], r.MessageUUID, nullLane(r.Lane), nullText(r.OrderingKey), r.Transport,
					r.Destination, nullText(r.MessageType), r.Headers, r.Body, nullText(r.TenantID), r.CreatedAt, r.CreatedAt})
			}
			return conn.Raw(func(dc any) error {
				pc := dc.(*stdlib.Conn).Conn()
				tx, err := pc.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := tx.CopyFrom(ctx, ident, cols, pgx.CopyFromRows(rows)); err != nil {
					tx.Rollback(ctx)
					return err
				}
				return tx.Commit(ctx)
			})
		}
	}
	b.Fatalf("unknown method %s", method)
	return nil
}

func nullLane(l int) any {
	if l == outbox.Unordered {
		return nil
	}
	return l
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// BenchmarkInsertStatement isolates the statement from the commit: one transaction, the
// same insert executed again and again, the store's Insert (VALUES up to 8 rows, unnest
// above) interleaved with a hand-written VALUES INSERT; "values-x" is the hand-written
// statement's time over the store's. It picked the store's threshold: below about ten
// rows VALUES wins (unnest of twelve arrays costs more to plan and run), above it unnest.
func BenchmarkInsertStatement(b *testing.B) {
	db := openDB(b, "")
	ctx := context.Background()
	for _, rows := range []int{1, 8, 9, 16, 32, 64} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			s := newStore(b, db, outbox.Options{Lanes: 64})
			table := postgres.QualifiedTable(s.Options(), s.Options().OutboxTable())
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Rollback()
			recs := make([]outbox.Record, rows)
			for i := range recs {
				recs[i] = rec(base, fmt.Sprintf("key-%d", i%10), 64)
			}
			var q strings.Builder
			q.WriteString("INSERT INTO " + table + " (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at) VALUES ")
			for i := range recs {
				if i > 0 {
					q.WriteString(", ")
				}
				n := i * 12
				fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)",
					n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11, n+12)
			}
			values := q.String()
			var args []any
			var storeTime, valuesTime time.Duration
			runStore := func() {
				for i := range recs {
					recs[i].ID = outbox.NewID()
				}
				start := time.Now()
				if err := s.Insert(ctx, tx, recs); err != nil {
					b.Fatal(err)
				}
				storeTime += time.Since(start)
			}
			runValues := func() {
				args = args[:0]
				for i := range recs {
					r := &recs[i]
					r.ID = outbox.NewID()
					args = append(args, r.ID[:], r.MessageUUID, nullLane(r.Lane), nullText(r.OrderingKey), r.Transport,
						r.Destination, nullText(r.MessageType), r.Headers, r.Body, nullText(r.TenantID), r.CreatedAt, r.CreatedAt)
				}
				start := time.Now()
				if _, err := tx.ExecContext(ctx, values, args...); err != nil {
					b.Fatal(err)
				}
				valuesTime += time.Since(start)
			}
			b.ResetTimer()
			for n := range b.N {
				// Alternate which goes first; only the store's statement is on the clock.
				if n%2 == 0 {
					runStore()
					b.StopTimer()
					runValues()
					b.StartTimer()
				} else {
					b.StopTimer()
					runValues()
					b.StartTimer()
					runStore()
				}
			}
			b.ReportMetric(float64(valuesTime)/float64(storeTime), "values-x")
		})
	}
}
