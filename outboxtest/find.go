package outboxtest

import (
	"errors"
	"slices"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func findTests() []subtest {
	return []subtest{
		{"ByUUIDStates", testFindByUUIDStates},
		{"ByOrderingKey", testFindByOrderingKey},
		{"ByWindowAndTopic", testFindByWindow},
		{"NotInOutboxWithInbox", testFindNotInOutbox},
		{"LockedInAnOpenBatch", testFindLocked},
		{"Arguments", testFindArguments},
	}
}

// finder returns e's store as an outbox.Finder.
func (e *env) finder() outbox.Finder {
	e.t.Helper()
	f, ok := e.store.(outbox.Finder)
	if !ok {
		e.t.Fatalf("%s store %T does not implement outbox.Finder", e.h.Name, e.store)
	}
	return f
}

func (e *env) find(q outbox.FindQuery, now time.Time) outbox.FindResult {
	e.t.Helper()
	res, err := outbox.Find(e.ctx, e.store, q, now)
	if err != nil {
		e.t.Fatalf("Find(%+v): %v", q, err)
	}
	return res
}

// idAtTime returns an id whose time is t, distinct per n.
func idAtTime(t time.Time, n int) outbox.ID {
	id := outbox.IDFromTime(t)
	id[14], id[15] = byte(n>>8), byte(n)+1
	return id
}

// A UUID is found in every state a row can be in: pending, scheduled, claimed (with
// its token and expiry), parked (error and attempts), and in a lane with its lease.
// Without the message_uuid index it needs a time window; with it, none.
func testFindByUUIDStates(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.finder()
	now := at(time.Hour)
	pending, scheduled, claimed, parked := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	scheduled.DeliverAt = at(2 * time.Hour)
	laned := laneRecord("key-find", at(0))
	other := NewRecord(at(0))
	for _, r := range []*outbox.Record{&pending, &scheduled, &claimed, &parked, &laned} {
		r.MessageUUID = "shared-" + r.ID.String()
	}
	e.insert(pending, scheduled, claimed, parked, laned, other)
	token, got := e.claimUnordered(10, now, now.Add(time.Minute))
	if !slices.ContainsFunc(got, func(r outbox.Record) bool { return r.ID == claimed.ID }) {
		// The claim took every due unordered row: release the others.
		t.Fatalf("the claim did not take the row (got %d rows)", len(got))
	}
	if _, err := e.store.Release(e.ctx, outbox.ReleaseParams{Token: token, IDs: idsOf(pending, parked, other), Now: now, Lane: outbox.Unordered}); err != nil {
		t.Fatal(err)
	}
	e.park(parked.ID, "broker said no", now)
	lease := e.acquire(laned.Lane)

	window := outbox.FindQuery{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)}
	want := map[outbox.ID]outbox.RowState{pending.ID: outbox.RowPending, scheduled.ID: outbox.RowScheduled,
		claimed.ID: outbox.RowClaimed, parked.ID: outbox.RowParked, laned.ID: outbox.RowPending}
	check := func(q outbox.FindQuery) {
		for id, state := range want {
			q.MessageUUID = "shared-" + id.String()
			res := e.find(q, now)
			if len(res.Rows) != 1 || res.Rows[0].ID != id || res.NotInOutbox != "" {
				t.Fatalf("Find %s: %d rows (%+v), want the one row", q.MessageUUID, len(res.Rows), res.Rows)
			}
			r := res.Rows[0]
			if r.State != state {
				t.Errorf("Find %s: state %s, want %s", q.MessageUUID, r.State, state)
			}
			switch id {
			case claimed.ID:
				if r.ClaimToken != token || !r.ClaimExpiresAt.Equal(now.Add(time.Minute)) {
					t.Errorf("claimed row: token %s until %s, want %s until %s", r.ClaimToken, r.ClaimExpiresAt, token, now.Add(time.Minute))
				}
			case parked.ID:
				if r.LastError != "broker said no" || r.Status != outbox.StatusParked {
					t.Errorf("parked row: error %q status %s", r.LastError, r.Status)
				}
			case scheduled.ID:
				if !r.DeliverAt.Equal(at(2 * time.Hour)) {
					t.Errorf("scheduled row: DeliverAt %s", r.DeliverAt)
				}
			case laned.ID:
				if r.Lease == nil || r.Lease.Token != lease || !r.Lease.Live || r.OrderingKey != "key-find" {
					t.Errorf("lane row: lease %+v key %q, want the live lease %s", r.Lease, r.OrderingKey, lease)
				}
			}
			if r.Body != nil || len(r.Headers) == 0 {
				t.Errorf("Find %s: body %q headers %d bytes, want no body and the headers", q.MessageUUID, r.Body, len(r.Headers))
			}
		}
	}
	check(window)
	_, _, err := e.finder().FindRows(e.ctx, outbox.FindQuery{MessageUUID: "shared-" + pending.ID.String()})
	if h.CreateFindIndex == nil {
		if !errors.Is(err, outbox.ErrFindNeedsIndex) {
			t.Fatalf("FindRows by UUID without a window or index: %v, want ErrFindNeedsIndex", err)
		}
		return
	}
	if !errors.Is(err, outbox.ErrFindNeedsIndex) {
		t.Fatalf("FindRows by UUID before the index: %v, want ErrFindNeedsIndex", err)
	}
	if err := h.CreateFindIndex(h.DB, e.opts); err != nil {
		t.Fatalf("CreateFindIndex: %v", err)
	}
	check(outbox.FindQuery{})
	check(window)
	// A window that does not hold the row finds nothing, index or not.
	res := e.find(outbox.FindQuery{MessageUUID: "shared-" + pending.ID.String(), To: time.Now().Add(-time.Hour)}, now)
	if len(res.Rows) != 0 {
		t.Errorf("a window before the row found %d rows", len(res.Rows))
	}
}

// An ordering key finds its pending and parked rows in id order, and no row of another
// key in its lane or of the unordered rows; Limit cuts and More says so.
func testFindByOrderingKey(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(3, testLanes, 2)
	a1, a2, a3 := laneRecord(keys[0], at(0)), laneRecord(keys[0], at(0)), laneRecord(keys[0], at(0))
	b := laneRecord(keys[1], at(0))
	u := NewRecord(at(0))
	u.OrderingKey = "" // unordered
	e.insert(a1, a2, a3, b, u)
	e.park(a1.ID, "poison", at(0))
	res := e.find(outbox.FindQuery{OrderingKey: keys[0]}, at(time.Minute))
	sameIDs(t, "Find by key", foundIDs(res), idsOf(a1, a2, a3))
	if res.More || res.Rows[0].State != outbox.RowParked || res.Rows[1].State != outbox.RowPending {
		t.Errorf("Find by key: more %v, states %s %s", res.More, res.Rows[0].State, res.Rows[1].State)
	}
	if res.Rows[1].Lease != nil {
		t.Errorf("a lane without a lease row has lease %+v", res.Rows[1].Lease)
	}
	res = e.find(outbox.FindQuery{OrderingKey: keys[0], Limit: 2}, at(time.Minute))
	sameIDs(t, "Find by key, Limit 2", foundIDs(res), idsOf(a1, a2))
	if !res.More {
		t.Error("Find by key with Limit 2 of 3 rows: More not set")
	}
	if res := e.find(outbox.FindQuery{OrderingKey: "no-such-key"}, at(0)); len(res.Rows) != 0 || res.NotInOutbox != "" {
		t.Errorf("unknown key: %d rows, NotInOutbox %q", len(res.Rows), res.NotInOutbox)
	}
}

// A window with a topic finds the topic's rows whose id time is in [From, To), pending
// or parked, in id order, and no row of another topic.
func testFindByWindow(t *testing.T, h Harness) {
	e := newEnv(t, h)
	t0 := time.Now().Truncate(time.Millisecond).Add(-time.Hour)
	var recs []outbox.Record
	for i := range 6 {
		r := NewRecord(at(0))
		r.ID = idAtTime(t0.Add(time.Duration(i)*time.Minute), i)
		if i%2 == 1 {
			r = NewOrderedRecord(at(0), "k", testLanes)
			r.ID = idAtTime(t0.Add(time.Duration(i)*time.Minute), i)
		}
		r.Destination = "orders"
		recs = append(recs, r)
	}
	otherTopic := NewRecord(at(0))
	otherTopic.ID = idAtTime(t0.Add(2*time.Minute), 100)
	otherTopic.Destination = "payments"
	e.insert(append(recs, otherTopic)...)
	e.park(recs[2].ID, "parked", at(0))
	res := e.find(outbox.FindQuery{Topic: "orders", From: t0.Add(time.Minute), To: t0.Add(4 * time.Minute)}, at(0))
	sameIDs(t, "Find by window", foundIDs(res), idsOf(recs[1], recs[2], recs[3]))
	res = e.find(outbox.FindQuery{Topic: "orders", From: t0.Add(4 * time.Minute)}, at(0))
	sameIDs(t, "Find since", foundIDs(res), idsOf(recs[4], recs[5]))
	res = e.find(outbox.FindQuery{Topic: "payments", To: t0.Add(time.Hour)}, at(0))
	sameIDs(t, "Find until, other topic", foundIDs(res), idsOf(otherTopic))
}

// A UUID with no row is "not in the outbox" (NotInOutboxExplanation), and each consumer
// whose inbox holds it is listed with its first processing time and duplicates, by
// consumer; other UUIDs' entries are not.
func testFindNotInOutbox(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	e.record(in, "shipping", "m-42", at(time.Minute))
	e.record(in, "billing", "m-42", at(0))
	e.record(in, "billing", "m-42", at(time.Hour))
	e.record(in, "billing", "m-42", at(2*time.Hour))
	e.record(in, "audit", "m-43", at(0))
	res := e.find(outbox.FindQuery{MessageUUID: "m-42", From: time.Now().Add(-time.Hour)}, at(3*time.Hour))
	if len(res.Rows) != 0 || res.NotInOutbox != outbox.NotInOutboxExplanation {
		t.Fatalf("Find of a sent message: %d rows, NotInOutbox %q", len(res.Rows), res.NotInOutbox)
	}
	want := []outbox.InboxEntry{
		{Consumer: "billing", MessageUUID: "m-42", ProcessedAt: at(0), Duplicates: 2},
		{Consumer: "shipping", MessageUUID: "m-42", ProcessedAt: at(time.Minute)},
	}
	if len(res.Inbox) != len(want) {
		t.Fatalf("inbox entries %+v, want %+v", res.Inbox, want)
	}
	for i := range want {
		g := res.Inbox[i]
		if g.Consumer != want[i].Consumer || g.MessageUUID != want[i].MessageUUID || !g.ProcessedAt.Equal(want[i].ProcessedAt) ||
			g.ProcessedAt.Location() != time.UTC || g.Duplicates != want[i].Duplicates {
			t.Errorf("inbox entry %d: %+v, want %+v", i, g, want[i])
		}
	}
	got, err := e.finder().FindInbox(e.ctx, "never-seen")
	if err != nil || len(got) != 0 {
		t.Errorf("FindInbox of an unknown UUID: %v, %v", got, err)
	}
}

// An unordered row a forwarder's open batch holds locked (BatchLocker) is in flight
// (RowLocked); the rows it does not hold stay pending, and once the batch rolls back
// the row is pending again. Finding waits for no lock.
func testFindLocked(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl, ok := e.store.(outbox.BatchLocker)
	if !ok {
		t.Skipf("%s store does not implement outbox.BatchLocker", h.Name)
	}
	a, b := NewRecord(at(0)), NewRecord(at(0))
	e.insert(a, b)
	batch, err := bl.LockBatch(e.ctx, outbox.LockParams{Limit: 1, Now: at(time.Minute)})
	if err != nil {
		t.Fatalf("LockBatch: %v", err)
	}
	defer func() { _ = batch.Rollback() }()
	if got := batch.Records(); len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("the batch locked %d rows", len(got))
	}
	window := outbox.FindQuery{Topic: "outboxtest.topic", From: time.Now().Add(-time.Hour)}
	res := e.find(window, at(time.Minute))
	if len(res.Rows) != 2 || res.Rows[0].State != outbox.RowLocked || res.Rows[1].State != outbox.RowPending {
		t.Fatalf("with the first row locked: %+v", res.Rows)
	}
	locked, err := e.finder().LockedRows(e.ctx, idsOf(a, b, NewRecord(at(0))))
	if err != nil || len(locked) != 1 || locked[0] != a.ID {
		t.Fatalf("LockedRows = %v, %v; want the locked row alone (not the missing one)", locked, err)
	}
	if err := batch.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res := e.find(window, at(time.Minute)); res.Rows[0].State != outbox.RowPending {
		t.Fatalf("after the batch rolled back: %s", res.Rows[0].State)
	}
	// The probe left no lock behind: a batch takes both rows.
	batch, err = bl.LockBatch(e.ctx, outbox.LockParams{Limit: 10, Now: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = batch.Rollback() }()
	if n := len(batch.Records()); n != 2 {
		t.Fatalf("a batch after the probes locked %d rows, want 2", n)
	}
}

// A query must name one selector; a store without Finder is refused by name.
func testFindArguments(t *testing.T, h Harness) {
	e := newEnv(t, h)
	now := time.Now()
	for _, q := range []outbox.FindQuery{
		{},
		{Topic: "orders"},
		{From: now},
		{MessageUUID: "u", OrderingKey: "k"},
		{Topic: "orders", From: now, To: now.Add(-time.Second)},
		{OrderingKey: "k", Limit: -1},
	} {
		if _, err := outbox.Find(e.ctx, e.store, q, now); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Find(%+v): %v, want ErrInvalidArgument", q, err)
		}
		if _, _, err := e.finder().FindRows(e.ctx, q); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("FindRows(%+v): %v, want ErrInvalidArgument", q, err)
		}
	}
	type plain struct{ outbox.Store }
	if _, err := outbox.Find(e.ctx, plain{e.store}, outbox.FindQuery{OrderingKey: "k"}, now); !errors.Is(err, outbox.ErrFindUnsupported) {
		t.Errorf("Find on a store without Finder: %v, want ErrFindUnsupported", err)
	}
}

func foundIDs(res outbox.FindResult) []outbox.ID {
	out := make([]outbox.ID, len(res.Rows))
	for i := range res.Rows {
		out[i] = res.Rows[i].ID
	}
	return out
}
