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

// openCounting opens a pool of one connection whose writes are counted: pgx's stdlib
// pool, or the same through postgres.WrapConnector (the harness's OpenCountingDB).
func openCounting(dsn string, connector bool) (*sql.DB, func() int64, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	writes := new(atomic.Int64)
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return testenv.CountingConn{Conn: c, Writes: writes}, nil
	}
	db := stdlib.OpenDB(*cfg)
	if connector {
		db = sql.OpenDB(postgres.WrapConnector(stdlib.GetConnector(*cfg)))
	}
	db.SetMaxOpenConns(1)
	return db, writes.Load, nil
}

// The wrapped connection keeps stdlib's behaviour: transactions the application
// begins, isolation and read-only options, a failed first statement (the transaction
// is rolled back and the connection stays usable), a COMMIT of a failed transaction,
// and the *pgx.Conn through (*sql.Conn).Raw.
func TestConnectorKeepsStdlibBehaviour(t *testing.T) {
	openDB(t, "") // skips or fails as the other tests do when the server is missing
	db, _, err := openCounting(testenv.DSN(t, testenv.Postgres), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
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

// OpenDB refuses a malformed DSN (TestConformanceConnector opens and uses a good one).
func TestOpenDB(t *testing.T) {
	if _, err := postgres.OpenDB("postgres://a b"); err == nil {
		t.Fatal("OpenDB accepted a malformed DSN")
	}
}
