package mysql_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// countingWrites counts the writes of the connections dialled through the network
// "outbox-counted-tcp": one per command the driver sends.
var countingWrites atomic.Int64

type countingConn struct{ net.Conn }

func (c countingConn) Write(b []byte) (int, error) {
	countingWrites.Add(1)
	return c.Conn.Write(b)
}

func init() {
	driver.RegisterDialContext("outbox-counted-tcp", func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c}, nil
	})
}

// countedPools opens two pools of one connection each over the counted network: the
// driver's, and mysql.NewConnector's, both for DSN variant v.
func countedPools(t *testing.T, v dsnVariant) (plain, fused *sql.DB) {
	t.Helper()
	openDB(t, v) // skips or fails as the other tests do when the server is missing
	cfg := config(t, v)
	if cfg.Net != "tcp" {
		t.Skipf("the test DSN dials %q, not tcp", cfg.Net)
	}
	cfg.Net = "outbox-counted-tcp"
	plain, err := openConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MultiStatements {
		t.Fatal("NewConnector changed the caller's Config")
	}
	fused = sql.OpenDB(c)
	for _, db := range []*sql.DB{plain, fused} {
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		if err := db.Ping(); err != nil { // connected before anything is counted
			t.Fatal(err)
		}
	}
	return plain, fused
}

// Through NewConnector, BeginRecordInbox sends START TRANSACTION and the record as one
// command; on the driver's own pool it takes two. Both record the same way, under
// every DSN form.
func TestConnectorRecordsInTheBeginRoundTrip(t *testing.T) {
	for _, v := range []dsnVariant{plainDSN, otherDSN} {
		t.Run(v.name, func(t *testing.T) {
			plain, fused := countedPools(t, v)
			s := newStore(t, plain, 0)
			ctx := context.Background()
			for _, c := range []struct {
				name string
				db   *sql.DB
				want int64
			}{{"driver", plain, 2}, {"NewConnector", fused, 1}} {
				for i, wantFirst := range []bool{true, false, false} {
					countingWrites.Store(0)
					tx, first, err := s.BeginRecordInbox(ctx, c.db, nil, "c", c.name, t0)
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					if got := countingWrites.Load(); got != c.want {
						t.Errorf("%s: BeginRecordInbox wrote %d commands; want %d", c.name, got, c.want)
					}
					if first != wantFirst {
						t.Errorf("%s: delivery %d: first = %v; want %v", c.name, i, first, wantFirst)
					}
					if err := tx.Commit(); err != nil {
						t.Fatalf("%s: commit: %v", c.name, err)
					}
				}
			}
			st, err := s.InboxStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Entries() != 2 || st.Duplicates() != 4 {
				t.Fatalf("InboxStats: %d entries, %d duplicates; want 2, 4", st.Entries(), st.Duplicates())
			}
		})
	}
}

// The connector's connections keep the driver's behaviour: the application's own
// transactions and queries, a read-only transaction (the record fails, nothing is left
// open, the connection stays usable), isolation levels the driver refuses.
func TestConnectorKeepsDriverBehaviour(t *testing.T) {
	_, db := countedPools(t, plainDSN)
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

// OpenDB parses the DSN and refuses a bad one.
func TestOpenDB(t *testing.T) {
	if _, err := mysql.OpenDB("root@tcp(127.0.0.1:3306/test"); err == nil {
		t.Fatal("OpenDB accepted a malformed DSN")
	}
	if _, err := mysql.NewConnector(nil); err == nil {
		t.Fatal("NewConnector(nil): no error")
	}
	openDB(t, plainDSN)
	db, err := mysql.OpenDB(testenv.DSN(t, testenv.MySQL))
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

// A transaction whose connection the driver closed (a statement's context ended) ends
// with the driver's errors, not database/sql's ErrBadConn (which the publisher would
// take for a stale pooled connection).
func TestConnectorClosedConnectionErrors(t *testing.T) {
	_, db := countedPools(t, plainDSN)
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
