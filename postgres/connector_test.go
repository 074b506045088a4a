package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// countingConn counts the writes of a client connection: one per request that pgx
// flushes to the server.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// countingPools opens two pools of one connection each whose writes are counted: pgx's
// stdlib pool, and the same through postgres.WrapConnector.
func countingPools(t *testing.T) (plain, wrapped *sql.DB, writes *atomic.Int64) {
	t.Helper()
	openDB(t, "") // skips or fails as the other tests do when the server is missing
	cfg, err := pgx.ParseConfig(testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	writes = new(atomic.Int64)
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
	plain = stdlib.OpenDB(*cfg)
	wrapped = sql.OpenDB(postgres.WrapConnector(stdlib.GetConnector(*cfg)))
	for _, db := range []*sql.DB{plain, wrapped} {
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
	}
	return plain, wrapped, writes
}

// Through WrapConnector, BeginRecordInbox sends BEGIN and the record in one request;
// on pgx's own pool it takes two. Both record the same way.
func TestConnectorRecordsInTheBeginRoundTrip(t *testing.T) {
	plain, wrapped, writes := countingPools(t)
	s := newStore(t, plain, outbox.Options{})
	ctx := context.Background()
	now := time.Now()
	for _, c := range []struct {
		name string
		db   *sql.DB
		want int64
	}{{"stdlib", plain, 2}, {"WrapConnector", wrapped, 1}} {
		// The first transaction prepares the statements on the connection, the second
		// takes stdlib's ping of a connection reused after more than a second.
		for range 2 {
			tx, _, err := s.BeginRecordInbox(ctx, c.db, nil, "c", c.name+"-warm", now)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
		for i, wantFirst := range []bool{true, false} {
			writes.Store(0)
			tx, first, err := s.BeginRecordInbox(ctx, c.db, nil, "c", c.name, now)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := writes.Load(); got != c.want {
				t.Errorf("%s: BeginRecordInbox wrote %d requests; want %d", c.name, got, c.want)
			}
			if first != wantFirst {
				t.Errorf("%s: delivery %d: first = %v; want %v", c.name, i, first, wantFirst)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("%s: commit: %v", c.name, err)
			}
		}
	}
}

// The wrapped connection keeps stdlib's behaviour: transactions the application
// begins, isolation and read-only options, a failed first statement (the transaction
// is rolled back and the connection stays usable), a COMMIT of a failed transaction,
// and the *pgx.Conn through (*sql.Conn).Raw.
func TestConnectorKeepsStdlibBehaviour(t *testing.T) {
	_, db, _ := countingPools(t)
	s := newStore(t, db, outbox.Options{})
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	var iso string
	if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "serializable" {
		t.Fatalf("application transaction: isolation %q, %v; want serializable", iso, err)
	}
	_ = tx.Rollback()

	tx, _, err = s.BeginRecordInbox(ctx, db, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, "c", "iso", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("inbox transaction: isolation %q, %v; want repeatable read", iso, err)
	}
	_ = tx.Rollback()

	// A read-only transaction cannot record: the error comes back, nothing is left open.
	if _, _, err := s.BeginRecordInbox(ctx, db, &sql.TxOptions{ReadOnly: true}, "c", "ro", time.Now()); err == nil {
		t.Fatal("read-only BeginRecordInbox: no error")
	}
	if _, _, err := s.BeginRecordInbox(ctx, db, &sql.TxOptions{Isolation: sql.LevelLinearizable}, "c", "lin", time.Now()); err == nil {
		t.Fatal("linearizable BeginRecordInbox: no error")
	}
	tx, first, err := s.BeginRecordInbox(ctx, db, nil, "c", "ro", time.Now())
	if err != nil || !first {
		t.Fatalf("after the failures: first %v, %v; want a new entry", first, err)
	}
	// A failed statement aborts the transaction: its COMMIT is pgx.ErrTxCommitRollback.
	if _, err := tx.ExecContext(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("division by zero: no error")
	}
	if err := tx.Commit(); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit of a failed transaction: %v; want pgx.ErrTxCommitRollback", err)
	}
	tx, first, err = s.BeginRecordInbox(ctx, db, nil, "c", "ro", time.Now())
	if err != nil || !first {
		t.Fatalf("after the failed commit: first %v, %v; want a new entry (it was rolled back)", first, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errors.New("driver connection has no Conn() *pgx.Conn")
		}
		return pc.Conn().Ping(ctx)
	})
	if err != nil {
		t.Fatalf("Raw: %v", err)
	}
	if st := db.Stats(); st.InUse != 1 {
		t.Fatalf("%d connections in use; want 1 (the Conn)", st.InUse)
	}
}

// OpenDB parses the DSN and refuses a bad one.
func TestOpenDB(t *testing.T) {
	if _, err := postgres.OpenDB("postgres://a b"); err == nil {
		t.Fatal("OpenDB accepted a malformed DSN")
	}
	openDB(t, "")
	db, err := postgres.OpenDB(testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
}
