package outboxtest

import (
	"slices"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// A store works whatever isolation level its pool's sessions default to: an
// application's SessionInitSQL or DSN may set SERIALIZABLE, and a store that relies on
// the server's default (READ COMMITTED) would fail (SQL Server refuses READPAST there,
// error 650) or behave otherwise.
func isolationTests() []subtest {
	return []subtest{
		{"SerializableSessions", testSerializableSessions},
	}
}

// Every read, claim and write of the store returns the same as on a default pool when
// the pool's sessions run at SERIALIZABLE.
func testSerializableSessions(t *testing.T, h Harness) {
	if h.OpenSerializable == nil {
		t.Fatalf("Harness %q lacks OpenSerializable: the rule needs a pool whose sessions default to SERIALIZABLE", h.Name)
	}
	e := newEnv(t, h)
	db, err := h.OpenSerializable()
	if err != nil {
		t.Fatalf("OpenSerializable: %v", err)
	}
	defer db.Close()
	s, err := h.NewStore(db, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx
	unordered := e.insertNew(3)
	lane := e.laneRows(3, 2)
	got, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: at(0)}, make([]outbox.Record, 10))
	wantN(t, "Read", len(got), err, 3)
	got, err = s.Read(ctx, outbox.ReadQuery{Lane: 3, Now: at(0)}, make([]outbox.Record, 10))
	wantN(t, "Read of lane 3", len(got), err, 2)
	got, err = s.Head(ctx, outbox.HeadQuery{Lane: 3, Limit: 10, Now: at(0), HoldParkedKeys: true}, nil)
	wantN(t, "Head", len(got), err, 2)
	n, err := s.Count(ctx, at(0))
	wantN(t, "Count", int(n), err, 5)
	st, err := s.Stats(ctx, at(0))
	wantN(t, "Stats lanes", len(st.Lanes), err, 2)
	lanes, err := s.PendingLanes(ctx)
	if err != nil || !slices.Equal(lanes, []int{3}) {
		t.Fatalf("PendingLanes = %v, %v; want [3]", lanes, err)
	}
	maxLane, err := s.MaxLane(ctx)
	wantN(t, "MaxLane", maxLane, err, 3)

	tok := outbox.NewToken()
	claimed, err := s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 2, Now: at(0), Until: at(time.Minute), Token: tok}, nil)
	wantN(t, "Claim", len(claimed), err, 2)
	n2, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: ids(claimed), Now: at(0), Lane: outbox.Unordered})
	wantN(t, "Complete", n2, err, 2)
	lease := outbox.NewToken()
	ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 3, Owner: "serializable", Token: lease, TTL: time.Hour})
	wantBool(t, "AcquireLease", ok, err, true)
	ltok := outbox.NewToken()
	claimed, err = s.Claim(ctx, outbox.ClaimParams{Lane: 3, Limit: 10, Now: at(0), Until: at(time.Minute), Token: ltok, Lease: lease}, nil)
	if err != nil {
		t.Fatalf("ordered Claim: %v", err)
	}
	sameIDs(t, "ordered Claim", ids(claimed), ids(lane))
	n2, err = s.Complete(ctx, outbox.CompleteParams{Token: ltok, IDs: ids(claimed), Now: at(0), Lane: 3, Lease: lease})
	wantN(t, "ordered Complete", n2, err, 2)
	ok, err = s.Park(ctx, unordered[2].ID, "poison", at(0))
	wantBool(t, "Park", ok, err, true)
	n2, err = s.Purge(ctx, outbox.ParkedFilter{All: true})
	wantN(t, "Purge", n2, err, 1)
	testSerializableBatchAndInbox(t, e, s)
}

// testSerializableBatchAndInbox continues testSerializableSessions with LockBatch and
// the inbox, where the store has them.
func testSerializableBatchAndInbox(t *testing.T, e *env, s outbox.Store) {
	t.Helper()
	rest := e.insertNew(2)
	if bl, ok := s.(outbox.BatchLocker); ok {
		b, err := bl.LockBatch(e.ctx, outbox.LockParams{Limit: 10, Now: at(0)})
		if err != nil {
			t.Fatalf("LockBatch: %v", err)
		}
		sameIDs(t, "LockBatch", ids(b.Records()), ids(rest))
		if err := b.Finish(e.ctx, outbox.FinishParams{Done: ids(rest)}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	if in, ok := s.(outbox.Inbox); ok {
		if _, err := in.PruneInbox(e.ctx, at(0), 10); err != nil {
			t.Fatalf("PruneInbox: %v", err)
		}
		if _, err := in.InboxStats(e.ctx); err != nil {
			t.Fatalf("InboxStats: %v", err)
		}
	}
}
