package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// TestDeadlockIsRetryable provokes a real deadlock through the store: two transactions
// insert the same two ids in opposite orders, so each waits on the other's uncommitted
// unique key. The victim's Insert error must be an *outbox.RetryableError that still
// exposes the PgError (40P01).
func TestDeadlockIsRetryable(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	s := newStore(t, db, outbox.Options{Lanes: 8})
	ctx := context.Background()
	a, b := rec(base, "", 8), rec(base, "", 8)

	var first sync.WaitGroup // both transactions hold their first row
	first.Add(2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, order := range [][2]outbox.Record{{a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					first.Done()
					return err
				}
				defer tx.Rollback()
				_, err = tx.Exec(`SET LOCAL deadlock_timeout = '50ms'`)
				if err == nil {
					err = s.Insert(ctx, tx, order[:1])
				}
				first.Done()
				if err != nil {
					return err
				}
				first.Wait()
				if err := s.Insert(ctx, tx, order[1:]); err != nil {
					return err
				}
				return tx.Commit()
			}()
		}()
	}
	wg.Wait()
	var victims int
	for _, err := range errs {
		if err == nil {
			continue
		}
		victims++
		var pg *pgconn.PgError
		if !outbox.IsRetryable(err) || !errors.As(err, &pg) || pg.Code != "40P01" {
			t.Errorf("error %v: retryable %v; want a retryable 40P01", err, outbox.IsRetryable(err))
		}
	}
	if victims != 1 {
		t.Fatalf("errors = %v; want exactly one deadlock victim", errs)
	}
}

// TestStoreTranslatesRetryable: a lock_not_available raised by a store statement (the
// session's lock_timeout expiring while a claim waits on a leased lane row) comes back
// retryable through the store's own edge.
func TestStoreTranslatesRetryable(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	db.SetMaxOpenConns(2)
	s := newStore(t, db, outbox.Options{Lanes: 8})
	ctx := context.Background()
	r := rec(base, "k", 8)
	insert(t, db, s, r)
	lease := outbox.NewToken()
	if ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: r.Lane, Owner: "x", Token: lease, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	// Hold the lease row exclusively; the claim's FOR SHARE on it must wait.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	lanesTbl := postgres.QualifiedTable(s.Options(), s.Options().LanesTable())
	if _, err := tx.Exec(`SELECT 1 FROM `+lanesTbl+` WHERE lane = $1 FOR UPDATE`, r.Lane); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `SET lock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	conn.Close() // back to the pool, with lock_timeout set; the pool has at most one other connection (tx's)
	_, err = s.Claim(ctx, outbox.ClaimParams{Lane: r.Lane, Limit: 1, Now: base, Until: base.Add(time.Minute), Token: outbox.NewToken(), Lease: lease}, nil)
	var pg *pgconn.PgError
	if !outbox.IsRetryable(err) || !errors.As(err, &pg) || pg.Code != "55P03" {
		t.Fatalf("Claim = %v; want a retryable 55P03", err)
	}
}

// TestTranslateCodes pins the SQLSTATE mapping (the deadlock and lock-timeout tests
// above provoke two of them for real; a serialization failure needs SERIALIZABLE
// transactions of the application's own).
func TestTranslateCodes(t *testing.T) {
	for code, want := range map[string]bool{"40001": true, "40P01": true, "55P03": true, "23505": false, "57014": false} {
		err := postgres.Translate(fmt.Errorf("exec: %w", &pgconn.PgError{Code: code}))
		var pg *pgconn.PgError
		if outbox.IsRetryable(err) != want || !errors.As(err, &pg) || pg.Code != code {
			t.Errorf("%s: %v retryable %v; want %v with the PgError reachable", code, err, outbox.IsRetryable(err), want)
		}
		if again := postgres.Translate(err); want && again != err {
			t.Errorf("%s: translating twice wrapped again: %v", code, again)
		}
	}
	if postgres.Translate(nil) != nil {
		t.Error("Translate(nil) != nil")
	}
}
