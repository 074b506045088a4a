package mysql_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// countingNets numbers the dial networks openCounting registers, one per pool.
var countingNets atomic.Int64

// openCounting opens a pool of one connection for cfg whose writes are counted: the
// driver's pool, or mysql.NewConnector's (the harness's OpenCountingDB).
func openCounting(cfg *driver.Config, connector bool) (*sql.DB, func() int64, error) {
	cfg = cfg.Clone()
	network, writes := cfg.Net, new(atomic.Int64)
	cfg.Net = fmt.Sprintf("outbox-counted-%d", countingNets.Add(1))
	driver.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return testenv.CountingConn{Conn: c, Writes: writes}, nil
	})
	var db *sql.DB
	if connector {
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, nil, err
		}
		if cfg.MultiStatements {
			return nil, nil, errors.New("NewConnector changed the caller's Config")
		}
		db = sql.OpenDB(c)
	} else {
		var err error
		if db, err = openConfig(cfg); err != nil {
			return nil, nil, err
		}
	}
	db.SetMaxOpenConns(1)
	return db, writes.Load, nil
}

// connectorDB opens a pool of one connection through mysql.NewConnector for t.
func connectorDB(t *testing.T) *sql.DB {
	t.Helper()
	openDB(t, plainDSN) // skips or fails as the other tests do when the server is missing
	db, _, err := openCounting(config(t, plainDSN), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// The connector's connections keep the driver's behaviour: the application's own
// transactions and queries, a read-only transaction (the record fails, nothing is left
// open, the connection stays usable), isolation levels the driver refuses.
func TestConnectorKeepsDriverBehaviour(t *testing.T) {
	db := connectorDB(t)
	s := newStore(t, db, 0)
	ctx := context.Background()
	// noTxOpen fails t when the pool's one connection is inside a transaction: the
	// server refuses to change the next transaction's characteristics then (1568).
	noTxOpen := func(after string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
			t.Fatalf("after %s, a transaction is open: %v", after, err)
		}
	}

	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT ?", 1); err != nil {
		t.Fatalf("a statement with a placeholder: %v", err)
	}
	_ = tx.Rollback()

	if _, _, err := s.BeginRecordInbox(ctx, db, &sql.TxOptions{ReadOnly: true}, "c", "ro", t0); err == nil {
		t.Fatal("read-only BeginRecordInbox: no error")
	}
	noTxOpen("a failed record")
	if _, _, err := s.BeginRecordInbox(ctx, db, &sql.TxOptions{Isolation: sql.LevelLinearizable}, "c", "lin", t0); err == nil {
		t.Fatal("linearizable BeginRecordInbox: no error")
	}
	tx, first, err := s.BeginRecordInbox(ctx, db, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, "c", "ro", t0)
	if err != nil || !first {
		t.Fatalf("after the failures: first %v, %v; want a new entry", first, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	noTxOpen("a rollback")
	tx, first, err = s.BeginRecordInbox(ctx, db, nil, "c", "ro", t0)
	if err != nil || !first {
		t.Fatalf("after the rollback: first %v, %v; want a new entry (it was rolled back)", first, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// OpenDB refuses a malformed DSN (the inbox tests' fused pools open and use a good one).
func TestOpenDB(t *testing.T) {
	if _, err := mysql.OpenDB("root@tcp(127.0.0.1:3306/test"); err == nil {
		t.Fatal("OpenDB accepted a malformed DSN")
	}
	if _, err := mysql.NewConnector(nil); err == nil {
		t.Fatal("NewConnector(nil): no error")
	}
}

// A transaction whose connection the driver closed (a statement's context ended) ends
// with the driver's errors, not database/sql's ErrBadConn (which the publisher would
// take for a stale pooled connection).
func TestConnectorClosedConnectionErrors(t *testing.T) {
	db := connectorDB(t)
	s := newStore(t, db, 0)
	ctx := context.Background()
	for _, end := range []string{"commit", "rollback"} {
		tx, _, err := s.BeginRecordInbox(ctx, db, nil, "c", end, t0)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = tx.ExecContext(short, "DO SLEEP(2)")
		cancel()
		if err == nil {
			t.Fatal("DO SLEEP(2) under a 50 ms context: no error")
		}
		if end == "commit" {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err == nil || errors.Is(err, sqldriver.ErrBadConn) {
			t.Fatalf("%s after the connection was closed: %v; want the driver's error", end, err)
		}
		if !errors.Is(err, driver.ErrInvalidConn) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s after the connection was closed: %v; want ErrInvalidConn or the context's error", end, err)
		}
	}
	// The pool goes on with a new connection; the entries were not kept.
	tx, first, err := s.BeginRecordInbox(ctx, db, nil, "c", "commit", t0)
	if err != nil || !first {
		t.Fatalf("after the closed connections: first %v, %v; want a new entry", first, err)
	}
	_ = tx.Rollback()
}
