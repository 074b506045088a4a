package outboxtest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

// lockedBatchTests cover the optional outbox.BatchLocker capability; each skips when the
// dialect's store does not implement it.
func lockedBatchTests() []subtest {
	return []subtest{
		{"LocksEligibleInIDOrder", testLockedBatchEligible},
		{"DisjointAndHiddenFromClaim", testLockedBatchDisjoint},
		{"FinishDeletesAndFails", testLockedBatchFinish},
		{"RollbackChangesNothing", testLockedBatchRollback},
		{"CancelledContextChangesNothing", testLockedBatchCancelled},
		{"Empty", testLockedBatchEmpty},
		{"AfterCursor", testLockedBatchAfter},
		{"FinishHandsOverClaims", testLockedBatchHandover},
		{"RecordsBelongToCaller", testLockedBatchRecordsOwned},
		{"FinishAfterRecordsCleared", testLockedBatchRecordsCleared},
		{"RecordsAppendedToDst", testLockedBatchDst},
	}
}

// locker returns the store as an outbox.BatchLocker, or skips the test.
func (e *env) locker(t *testing.T) outbox.BatchLocker {
	t.Helper()
	bl, ok := e.store.(outbox.BatchLocker)
	if !ok {
		t.Skipf("%s store does not implement outbox.BatchLocker", e.h.Name)
	}
	return bl
}

// lockBatch locks up to limit rows at now, and rolls the batch back when the test ends.
func (e *env) lockBatch(bl outbox.BatchLocker, ctx context.Context, limit int, now time.Time) outbox.LockedBatch {
	e.t.Helper()
	return e.lockBatchAfter(bl, ctx, limit, now, outbox.ID{})
}

// lockBatchAfter is lockBatch with an ID cursor.
func (e *env) lockBatchAfter(bl outbox.BatchLocker, ctx context.Context, limit int, now time.Time, after outbox.ID) outbox.LockedBatch {
	e.t.Helper()
	b, err := bl.LockBatch(ctx, outbox.LockParams{Limit: limit, Now: now, After: after})
	if err != nil {
		e.t.Fatalf("LockBatch(limit %d, now %s): %v", limit, fmtTime(now), err)
	}
	if n := len(b.Records()); n > limit {
		e.t.Fatalf("LockBatch returned %d rows for limit %d", n, limit)
	}
	e.t.Cleanup(func() { _ = b.Rollback() })
	return b
}

func rollback(t testing.TB, b outbox.LockedBatch) {
	t.Helper()
	if err := b.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
}

// LockBatch takes eligible unordered rows in ID order up to the limit, never lane rows,
// rows not due, parked rows or rows with a live claim; the records are the stored rows.
func testLockedBatchEligible(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	claimed := NewRecord(at(0))
	e.insert(claimed)
	if _, c := e.claimUnordered(1, at(0), at(time.Hour)); len(c) != 1 {
		t.Fatalf("claim = %d rows, want 1", len(c))
	}
	a, b := NewRecord(at(0)), NewRecord(at(0))
	notDue := NewRecord(at(0))
	notDue.DeliverAt = at(time.Hour)
	parked := NewRecord(at(0))
	lane := NewOrderedRecord(at(0), "key", testLanes)
	c, d := NewRecord(at(0)), NewRecord(at(0))
	e.insert(a, b, notDue, parked, lane, c, d)
	e.park(parked.ID, "parked", at(0))

	now := at(time.Second)
	first := e.lockBatch(bl, e.ctx, 3, now)
	sameIDs(t, "first batch (limit 3)", ids(first.Records()), idsOf(a, b, c))
	for i, want := range []outbox.Record{a, b, c} {
		checkRecord(t, "locked record", first.Records()[i], stored(want))
		if first.Records()[i].Corrupt != nil {
			t.Errorf("locked record %s: Corrupt = %v", want.ID, first.Records()[i].Corrupt)
		}
	}
	rollback(t, first)
	all := e.lockBatch(bl, e.ctx, 100, now)
	sameIDs(t, "batch after rollback (limit 100)", ids(all.Records()), idsOf(a, b, c, d))
	rollback(t, all)
	// Once the claim expires and the row is due, they are eligible too.
	late := e.lockBatch(bl, e.ctx, 100, at(2*time.Hour))
	sameIDs(t, "batch after the claim expired and the row fell due", ids(late.Records()), idsOf(claimed, a, b, notDue, c, d))
	rollback(t, late)
}

// Two open batches never hold the same row, and Claim never returns a row an open batch
// holds; the rows come back to others once the batches end.
func testLockedBatchDisjoint(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := e.insertNew(5)
	now := at(time.Second)
	first := e.lockBatch(bl, e.ctx, 2, now)
	sameIDs(t, "first batch", ids(first.Records()), idsOf(recs[:2]...))
	second := e.lockBatch(bl, e.ctx, 10, now)
	sameIDs(t, "second batch while the first is open", ids(second.Records()), idsOf(recs[2:]...))
	if _, got := e.claimUnordered(10, now, at(time.Minute)); len(got) != 0 {
		t.Fatalf("Claim while both batches are open took %s", idList(ids(got)))
	}
	third := e.lockBatch(bl, e.ctx, 10, now)
	if len(third.Records()) != 0 {
		t.Fatalf("third batch took locked rows %s", idList(ids(third.Records())))
	}
	rollback(t, first)
	_, got := e.claimUnordered(10, now, at(time.Minute))
	sameIDs(t, "Claim after the first batch rolled back", ids(got), idsOf(recs[:2]...))
	rollback(t, second)
}

// Finish deletes the done rows, records each failure (attempts+1, error text, RetryAt
// when after Now, Park), ignores IDs outside the batch, leaves unlisted rows unchanged
// and eligible, and commits.
func testLockedBatchFinish(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := newRecords(6)
	e.insert(recs[:5]...)
	outside := recs[5] // inserted after the batch locked its rows
	now := at(time.Second)
	b := e.lockBatch(bl, e.ctx, 10, now)
	sameIDs(t, "batch", ids(b.Records()), idsOf(recs[:5]...))
	e.insert(outside)
	fnow := at(2 * time.Second)
	retry := at(5*time.Minute + 3*us)
	msg := "boom: ünïcødé ✓ 'quoted' \"double\" `back`"
	err := b.Finish(e.ctx, outbox.FinishParams{Done: []outbox.ID{recs[0].ID, outside.ID}, Failed: []outbox.FailParams{
		{ID: recs[1].ID, Now: fnow, Error: msg, Token: outbox.NewToken(), Lane: 3},
		{ID: recs[2].ID, Now: fnow, Error: "later", RetryAt: retry},
		{ID: recs[3].ID, Now: fnow, Error: "poison", Park: true},
		{ID: outside.ID, Now: fnow, Error: "not in the batch", Park: true},
	}})
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 5 {
		t.Fatalf("rows after Finish = %d, want 5 (one done row deleted)", n)
	}
	sameIDs(t, "eligible rows after Finish", e.readIDs(outbox.Unordered, fnow), idsOf(recs[1], recs[4], outside))
	got := e.read(outbox.Unordered, outbox.ID{}, fnow, 10)
	failed := stored(recs[1])
	failed.Attempts, failed.LastError = 1, msg
	checkRecord(t, "failed row", got[0], failed)
	checkRecord(t, "row named in neither list", got[1], stored(recs[4]))
	checkRecord(t, "row outside the batch", got[2], stored(outside))
	e.expiresAt("row failed with RetryAt", outbox.Unordered, idsOf(recs[2]), retry)
	delayed := stored(recs[2])
	delayed.Attempts, delayed.LastError, delayed.DeliverAt = 1, "later", retry
	for _, r := range e.read(outbox.Unordered, outbox.ID{}, retry, 10) {
		if r.ID == recs[2].ID {
			checkRecord(t, "row failed with RetryAt", r, delayed)
		}
	}
	p := e.parked()
	if len(p) != 1 {
		t.Fatalf("ListParked = %d rows, want 1", len(p))
	}
	parked := stored(recs[3])
	parked.Attempts, parked.LastError, parked.Status = 1, "poison", outbox.StatusParked
	checkRecord(t, "parked row", p[0], parked)
	if err := b.Rollback(); err != nil {
		t.Fatalf("Rollback after Finish: %v", err)
	}
	// The finished batch's locks are gone: the remaining rows lock again at once.
	again := e.lockBatch(bl, e.ctx, 10, fnow)
	sameIDs(t, "batch after Finish", ids(again.Records()), idsOf(recs[1], recs[4], outside))
	rollback(t, again)
}

// Rollback leaves the rows exactly as they were and eligible again at once; it is
// idempotent.
func testLockedBatchRollback(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := []outbox.Record{NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))}
	e.insert(recs...)
	now := at(time.Second)
	b := e.lockBatch(bl, e.ctx, 10, now)
	sameIDs(t, "batch", ids(b.Records()), idsOf(recs...))
	rollback(t, b)
	rollback(t, b)
	again := e.lockBatch(bl, e.ctx, 10, now)
	sameIDs(t, "batch after Rollback", ids(again.Records()), idsOf(recs...))
	for i, r := range again.Records() {
		checkRecord(t, "row after Rollback", r, stored(recs[i]))
	}
	rollback(t, again)
	_, got := e.claimUnordered(10, now, at(time.Minute))
	sameIDs(t, "Claim after Rollback", ids(got), idsOf(recs...))
}

// Finish fails and changes nothing when the batch's context was cancelled, or when its
// own context is.
func testLockedBatchCancelled(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := []outbox.Record{NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))}
	e.insert(recs...)
	now := at(time.Second)
	fail := []outbox.FailParams{{ID: recs[1].ID, Now: now, Error: "x", Park: true}}

	ctx, cancel := context.WithCancel(e.ctx)
	b := e.lockBatch(bl, ctx, 2, now)
	sameIDs(t, "batch", ids(b.Records()), idsOf(recs[:2]...))
	cancel()
	if err := b.Finish(e.ctx, outbox.FinishParams{Done: idsOf(recs[0]), Failed: fail}); err == nil {
		t.Fatalf("Finish after the batch's context was cancelled = nil, want an error")
	}
	if err := b.Rollback(); err != nil {
		t.Fatalf("Rollback after a failed Finish: %v", err)
	}

	// The first batch's rows may or may not be free yet (the server rolls a cancelled
	// transaction back on its own time): this batch finishes whatever two rows it got.
	b2 := e.lockBatch(bl, e.ctx, 2, now)
	got2 := b2.Records()
	if len(got2) != 2 {
		t.Fatalf("second batch = %d rows, want 2", len(got2))
	}
	cctx, ccancel := context.WithCancel(e.ctx)
	ccancel()
	if err := b2.Finish(cctx, outbox.FinishParams{Done: idsOf(got2[0]), Failed: []outbox.FailParams{{ID: got2[1].ID, Now: now, Error: "y", Park: true}}}); err == nil {
		t.Fatalf("Finish with a cancelled context = nil, want an error")
	}
	rollback(t, b2)

	// Read does not lock: the rows are all there, unchanged, whether or not the server
	// has finished rolling back the cancelled transactions.
	if n := e.rawCount(e.opts.OutboxTable()); n != int64(len(recs)) {
		t.Fatalf("rows after the failed Finishes = %d, want %d", n, len(recs))
	}
	got := e.read(outbox.Unordered, outbox.ID{}, now, 10)
	sameIDs(t, "eligible rows after the failed Finishes", ids(got), idsOf(recs...))
	for i, r := range got {
		checkRecord(t, "row after the failed Finishes", r, stored(recs[i]))
	}
}

// A batch with nothing eligible, or of a limit below 1, is empty; Finish and Rollback
// succeed and change nothing.
func testLockedBatchEmpty(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	b := e.lockBatch(bl, e.ctx, 10, at(0))
	if len(b.Records()) != 0 {
		t.Fatalf("batch over an empty table = %d rows", len(b.Records()))
	}
	if err := b.Finish(e.ctx, outbox.FinishParams{Done: []outbox.ID{outbox.NewID()}}); err != nil {
		t.Fatalf("Finish of an empty batch: %v", err)
	}
	rollback(t, b)
	notDue := NewRecord(at(0))
	notDue.DeliverAt = at(time.Hour)
	e.insert(notDue)
	b = e.lockBatch(bl, e.ctx, 10, at(time.Second))
	if len(b.Records()) != 0 {
		t.Fatalf("batch with only a row not due = %d rows", len(b.Records()))
	}
	rollback(t, b)
	if err := b.Finish(e.ctx, outbox.FinishParams{}); err != nil {
		t.Fatalf("Finish of an empty batch after Rollback: %v", err)
	}
	// A limit below 1 locks nothing, even with an eligible row, and is no error.
	due := NewRecord(at(0))
	e.insert(due)
	for _, limit := range []int{0, -1} {
		b, err := bl.LockBatch(e.ctx, outbox.LockParams{Limit: limit, Now: at(time.Second)})
		if err != nil {
			t.Fatalf("LockBatch(limit %d): %v (a limit below 1 locks nothing)", limit, err)
		}
		if n := len(b.Records()); n != 0 {
			t.Fatalf("LockBatch(limit %d) locked %d rows", limit, n)
		}
		if err := b.Finish(e.ctx, outbox.FinishParams{Done: []outbox.ID{due.ID}}); err != nil {
			t.Fatalf("Finish of the limit %d batch: %v", limit, err)
		}
		rollback(t, b)
	}
	b = e.lockBatch(bl, e.ctx, 10, at(time.Second))
	if recs := b.Records(); len(recs) != 1 || recs[0].ID != due.ID {
		t.Fatalf("after the empty batches: locked %d rows, want the due row unchanged", len(recs))
	}
	rollback(t, b)
}

// LockBatch with After locks only rows with greater IDs, in ID order; the zero cursor
// starts from the beginning.
func testLockedBatchAfter(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := e.insertNew(5)
	b := e.lockBatchAfter(bl, e.ctx, 10, at(0), recs[1].ID)
	sameIDs(t, "LockBatch after the second row", ids(b.Records()), ids(recs[2:]))
	rollback(t, b)
	b = e.lockBatchAfter(bl, e.ctx, 10, at(0), recs[4].ID)
	sameIDs(t, "LockBatch after the last row", ids(b.Records()), nil)
	rollback(t, b)
	b = e.lockBatchAfter(bl, e.ctx, 2, at(0), outbox.ID{})
	sameIDs(t, "LockBatch from the start", ids(b.Records()), ids(recs[:2]))
}

// Finish with Claim commits the batch and leaves the listed rows claimed by the given
// token: the claim is live (Renew finds it, Claim skips it), completes through the Store,
// and expires like any claim; a row of the batch in no list is eligible at once.
func testLockedBatchHandover(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := e.insertNew(3)
	now := at(time.Second)
	b := e.lockBatch(bl, e.ctx, 10, now)
	if err := b.Finish(e.ctx, outbox.FinishParams{Claim: idsOf(recs[1])}); err == nil {
		t.Fatal("Finish with Claim and a zero Token: no error")
	}
	b = e.lockBatch(bl, e.ctx, 10, now)
	tok, until := outbox.NewToken(), at(time.Minute)
	if err := b.Finish(e.ctx, outbox.FinishParams{Done: idsOf(recs[0]), Claim: idsOf(recs[1]), Token: tok, Until: until}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	got := e.read(outbox.Unordered, outbox.ID{}, at(2*time.Hour), 10)
	sameIDs(t, "rows after Finish", ids(got), idsOf(recs[1], recs[2]))
	want := stored(recs[1])
	want.ClaimToken, want.ClaimExpiresAt = tok, until
	checkRecord(t, "handed-over row", got[0], want)
	checkRecord(t, "row in no list", got[1], stored(recs[2]))
	_, claimed := e.claimUnordered(10, at(2*time.Second), at(3*time.Second))
	sameIDs(t, "claim while the hand-over claim lives", ids(claimed), idsOf(recs[2]))
	n, err := e.store.Renew(e.ctx, outbox.RenewParams{Token: tok, Now: at(3 * time.Second), Until: at(2 * time.Minute), Lane: outbox.Unordered})
	wantN(t, "Renew of the handed-over claim", n, err, 1)
	n, err = e.store.Complete(e.ctx, outbox.CompleteParams{Token: tok, IDs: idsOf(recs[1]), Now: at(4 * time.Second), Lane: outbox.Unordered})
	wantN(t, "Complete of the handed-over claim", n, err, 1)
}

// The records of a batch (their Headers and Body included) belong to the caller: a
// forwarder keeps a locked row's payload as its message's. Finishing the batch and
// locking the next, whose rows have other bytes of other lengths, changes none of them.
func testLockedBatchRecordsOwned(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	first, next := newRecords(3), newRecords(3)
	for i := range first {
		first[i].Body = []byte(strings.Repeat("a", 10*(i+1)))
		next[i].Body = []byte(strings.Repeat("b", 40*(i+1)))
		next[i].Headers = headercodec.EncodeMetadata(nil, map[string]string{"other": strings.Repeat("h", 30)})
	}
	e.insert(first...)
	b := e.lockBatch(bl, e.ctx, 10, at(time.Second))
	kept := b.Records()
	if err := b.Finish(e.ctx, outbox.FinishParams{Done: ids(kept)}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	e.insert(next...)
	b2 := e.lockBatch(bl, e.ctx, 10, at(time.Second))
	sameIDs(t, "second batch", ids(b2.Records()), ids(next))
	rollback(t, b2)
	sameIDs(t, "first batch", ids(kept), ids(first))
	for i := range kept {
		checkRecord(t, "record of the first batch after the second", kept[i], stored(first[i]))
	}
}

// The caller may change or clear a batch's records before Finish (a forwarder drops
// them once it has built its messages): Finish works on the rows as they were locked.
func testLockedBatchRecordsCleared(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	recs := newRecords(4)
	e.insert(recs...)
	b := e.lockBatch(bl, e.ctx, 10, at(time.Second))
	got := b.Records()
	sameIDs(t, "locked", ids(got), ids(recs))
	done := ids(got[:3])
	clear(got)
	if err := b.Finish(e.ctx, outbox.FinishParams{Done: done}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	left := e.lockBatch(bl, e.ctx, 10, at(time.Second))
	defer rollback(t, left)
	sameIDs(t, "left after Finish", ids(left.Records()), ids(recs[3:]))
}

// LockParams.Dst is where the records go (appended to Dst[:0]): an array with room for
// the batch is reused, its old records overwritten whole; one without room grows.
func testLockedBatchDst(t *testing.T, h Harness) {
	e := newEnv(t, h)
	bl := e.locker(t)
	first, next := newRecords(3), newRecords(2)
	for i := range next {
		next[i].Headers = headercodec.EncodeMetadata(nil, map[string]string{"n": strings.Repeat("n", i+1)})
		next[i].Body = []byte(strings.Repeat("d", 20*(i+1)))
	}
	e.insert(first...)
	dst := make([]outbox.Record, 1, 10)
	dst[0] = stored(next[1])                                                            // an old record: nothing of it may remain
	dst[0].Headers, dst[0].Body = bytes.Clone(dst[0].Headers), bytes.Clone(dst[0].Body) // the store may reuse them
	dst[0].LastError, dst[0].Attempts = "old", 7
	b, err := bl.LockBatch(e.ctx, outbox.LockParams{Limit: 10, Now: at(time.Second), Dst: dst})
	if err != nil {
		t.Fatalf("LockBatch: %v", err)
	}
	got := b.Records()
	sameIDs(t, "first batch", ids(got), ids(first))
	if &got[0] != &dst[:1][0] {
		t.Error("Records are not in Dst's array, which has room for the batch")
	}
	for i := range got {
		checkRecord(t, "record in Dst's array", got[i], stored(first[i]))
	}
	if err := b.Finish(e.ctx, outbox.FinishParams{Done: ids(got)}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	e.insert(next...)
	b, err = bl.LockBatch(e.ctx, outbox.LockParams{Limit: 10, Now: at(time.Second), Dst: make([]outbox.Record, 0, 1)})
	if err != nil {
		t.Fatalf("LockBatch: %v", err)
	}
	defer rollback(t, b)
	grown := b.Records()
	sameIDs(t, "second batch (Dst without room)", ids(grown), ids(next))
	for i := range grown {
		checkRecord(t, "record of a grown Dst", grown[i], stored(next[i]))
	}
}
