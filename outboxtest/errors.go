package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func errorTests() []subtest {
	return []subtest{
		{"CancelledContext", testCancelledContext},
		{"ClosedDB", testClosedDB},
	}
}

type storeOp struct {
	name string
	call func(ctx context.Context, s outbox.Store) error
}

// storeOps calls every Store method but Insert with plausible arguments over a table
// holding rows: in a working store each of them succeeds (or reports "nothing changed").
func storeOps(id outbox.ID) []storeOp {
	now, until := at(0), at(time.Minute)
	tok := outbox.NewToken()
	key := "k"
	return []storeOp{
		{"CreateSchema", func(ctx context.Context, s outbox.Store) error { return s.CreateSchema(ctx) }},
		{"Read", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: now}, make([]outbox.Record, 10))
			return err
		}},
		{"Read lane", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Read(ctx, outbox.ReadQuery{Lane: 1, Now: now}, make([]outbox.Record, 10))
			return err
		}},
		{"Claim", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: now, Until: until, Token: outbox.NewToken()}, nil)
			return err
		}},
		{"Claim lane", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Claim(ctx, outbox.ClaimParams{Lane: 1, Limit: 10, Now: now, Until: until, Token: outbox.NewToken(), Lease: tok}, nil)
			return err
		}},
		{"Renew", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Renew(ctx, outbox.RenewParams{Lane: outbox.Unordered, Token: tok, Now: now, Until: until})
			return err
		}},
		{"Complete", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Complete(ctx, outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: []outbox.ID{id}, Now: now})
			return err
		}},
		{"Release", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Release(ctx, outbox.ReleaseParams{Token: tok, Now: now, Lane: outbox.Unordered})
			return err
		}},
		{"Fail", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Fail(ctx, outbox.FailParams{Lane: outbox.Unordered, ID: id, Token: tok, Now: now, Error: "x"})
			return err
		}},
		{"Park", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Park(ctx, outbox.NewID(), "x", now)
			return err
		}},
		{"Count", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Count(ctx, now)
			return err
		}},
		{"Stats", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Stats(ctx, now)
			return err
		}},
		{"MaxLane", func(ctx context.Context, s outbox.Store) error {
			_, err := s.MaxLane(ctx)
			return err
		}},
		{"PendingLanes", func(ctx context.Context, s outbox.Store) error {
			_, err := s.PendingLanes(ctx)
			return err
		}},
		{"ListParked", func(ctx context.Context, s outbox.Store) error {
			_, err := s.ListParked(ctx, outbox.ParkedQuery{Limit: 10})
			return err
		}},
		{"Requeue", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Requeue(ctx, outbox.ParkedFilter{OrderingKey: &key})
			return err
		}},
		{"Purge", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Purge(ctx, outbox.ParkedFilter{IDs: []outbox.ID{outbox.NewID()}})
			return err
		}},
		{"AcquireLease", func(ctx context.Context, s outbox.Store) error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 7, Owner: "o", Token: outbox.NewToken(), TTL: time.Minute})
			return err
		}},
		{"RenewLease", func(ctx context.Context, s outbox.Store) error {
			_, err := s.RenewLease(ctx, outbox.LeaseParams{Lane: 1, Owner: "o", Token: tok, TTL: time.Minute})
			return err
		}},
		{"ReleaseLease", func(ctx context.Context, s outbox.Store) error {
			_, err := s.ReleaseLease(ctx, 1, tok)
			return err
		}},
		{"Leases", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Leases(ctx)
			return err
		}},
		{"Heartbeat", func(ctx context.Context, s outbox.Store) error { return s.Heartbeat(ctx, "o", time.Minute) }},
		{"Head", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Head(ctx, outbox.HeadQuery{Lane: 1, Limit: 10, Now: now}, nil)
			return err
		}},
		{"Members", func(ctx context.Context, s outbox.Store) error {
			_, err := s.Members(ctx)
			return err
		}},
		{"Leave", func(ctx context.Context, s outbox.Store) error { return s.Leave(ctx, "nobody") }},
	}
}

// A cancelled context makes every method fail (wrapping context.Canceled), never
// return an empty read or a zero count.
func testCancelledContext(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r, NewRecord(at(0)))
	ops := storeOps(r.ID)
	for _, op := range ops {
		if err := op.call(e.ctx, e.store); err != nil {
			t.Fatalf("%s with a live context: %v", op.name, err)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	for _, op := range ops {
		err := op.call(ctx, e.store)
		if err == nil {
			t.Errorf("%s with a cancelled context returned no error", op.name)
		} else if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: error %q does not wrap context.Canceled", op.name, err)
		}
	}
	tx, err := h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := e.store.Insert(ctx, tx, []outbox.Record{NewRecord(at(0))}); err == nil {
		t.Errorf("Insert with a cancelled context returned no error")
	}
}

// Every method of a store whose *sql.DB is closed returns an error.
func testClosedDB(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	db, err := openClosable(h)
	if err != nil {
		t.Fatalf("open a second *sql.DB: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = db.Close()
		}
	})
	s, err := h.NewStore(db, e.opts)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	if n, err := s.Count(e.ctx, at(0)); err != nil || n != 1 {
		t.Fatalf("Count through the second *sql.DB = %d, %v; want 1", n, err)
	}
	var tx *sql.Tx
	if tx, err = db.BeginTx(e.ctx, nil); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if err := db.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	closed = true
	for _, op := range storeOps(r.ID) {
		if err := op.call(e.ctx, s); err == nil {
			t.Errorf("%s on a closed *sql.DB returned no error", op.name)
		}
	}
	if err := s.Insert(e.ctx, tx, []outbox.Record{NewRecord(at(0))}); err == nil {
		t.Errorf("Insert into a finished transaction of a closed *sql.DB returned no error")
	}
}
