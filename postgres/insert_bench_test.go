package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

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
// go test ./postgres -run '^$' -bench InsertMethods -benchmem
func BenchmarkInsertMethods(b *testing.B) {
	db := openDB(b, "")
	ctx := context.Background()
	for _, rows := range []int{64, 1000} {
		for _, method := range []string{"unnest", "values", "copy"} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, method), func(b *testing.B) {
				s := newStore(b, db, outbox.Options{Lanes: 64})
				recs := make([]outbox.Record, rows)
				for i := range recs {
					recs[i] = rec(base, fmt.Sprintf("key-%d", i%10), 64)
					recs[i].Body = []byte(strings.Repeat("b", 256))
				}
				insert := insertFunc(b, db, s, method)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					for i := range recs {
						recs[i].ID = outbox.NewID()
					}
					if err := insert(ctx, recs); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
			})
		}
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
