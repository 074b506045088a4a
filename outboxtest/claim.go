package outboxtest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func claimTests() []subtest {
	return []subtest{
		{"FreshTokenAndExclusive", testClaimExclusive},
		{"Race", testClaimRace},
		{"SkipsLockedRows", testClaimSkipsLocked},
		{"AfterCursor", testClaimAfter},
		{"AfterWithLaneIsAnError", testClaimAfterLane},
		{"NotHeldByOpenMultiRowWriter", testClaimOpenWriter},
	}
}

// A claim stamps its rows with the caller's token and expiry, in ID order; a claimed row
// is not claimed again while the claim lives; Limit bounds each claim.
func testClaimExclusive(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.insertNew(5)
	until := at(time.Minute)
	tokA, a := e.claimUnordered(2, at(0), until)
	sameIDs(t, "first claim (limit 2)", ids(a), idsOf(recs[:2]...))
	for i, r := range a {
		want := stored(recs[i])
		want.ClaimToken, want.ClaimExpiresAt = tokA, until
		checkRecord(t, "claimed record", r, want)
	}
	tokB, b := e.claimUnordered(10, at(time.Second), until)
	sameIDs(t, "second claim", ids(b), idsOf(recs[2:]...))
	if tokA == tokB || b[0].ClaimToken != tokB {
		t.Fatalf("second claim carries token %s, want its own %s", b[0].ClaimToken, tokB)
	}
	if _, c := e.claimUnordered(10, at(2*time.Second), until); len(c) != 0 {
		t.Fatalf("third claim took live-claimed rows %s", idList(ids(c)))
	}
	// Claim appends to dst[:0].
	dst := make([]outbox.Record, 1, 4)
	dst[0].ID = outbox.NewID()
	got, err := e.store.Claim(e.ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 4, Now: until, Until: until.Add(time.Minute), Token: outbox.NewToken()}, dst)
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "claim after the claims expired", ids(got), ids(recs[:4]))
	if &got[0] != &dst[0] {
		t.Errorf("Claim did not append to dst[:0]")
	}
}

// Eight claimers racing over 10,000 rows: every row is claimed exactly once.
func testClaimRace(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const rows, claimers, batch = 10_000, 8, 100
	recs := make([]outbox.Record, rows)
	for i := range recs {
		recs[i] = NewRecord(at(0))
		recs[i].Body = recs[i].Body[:8]
	}
	e.insert(recs...)
	var (
		mu        sync.Mutex
		owner     = make(map[outbox.ID]int, rows)
		retries   int
		wg        sync.WaitGroup
		now       = at(time.Second)
		until     = at(time.Hour)
		failed    = make(chan error, claimers)
		dupReport int
	)
	for c := 0; c < claimers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []outbox.Record
			for {
				var err error
				dst, err = e.store.Claim(e.ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: batch, Now: now, Until: until, Token: outbox.NewToken()}, dst)
				if outbox.IsRetryable(err) {
					mu.Lock()
					retries++
					mu.Unlock()
					continue
				}
				if err != nil {
					failed <- err
					return
				}
				if len(dst) == 0 {
					// Rows other claimers hold locked are skipped; stop only when none is left.
					n, err := e.store.Count(e.ctx, now)
					if err != nil {
						failed <- err
						return
					}
					if n == 0 {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, r := range dst {
					if prev, dup := owner[r.ID]; dup {
						dupReport++
						if dupReport <= 5 {
							t.Errorf("row %s claimed by claimer %d and again by claimer %d", r.ID, prev, c)
						}
					}
					owner[r.ID] = c
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Errorf("claimer: %v", err)
	}
	if dupReport > 0 {
		t.Errorf("%d rows were claimed twice", dupReport)
	}
	if len(owner) != rows {
		t.Fatalf("%d distinct rows claimed, want %d", len(owner), rows)
	}
	per := make([]int, claimers)
	for _, c := range owner {
		per[c]++
	}
	t.Logf("rows per claimer %v, %d retryable errors retried", per, retries)
}

// lockRow holds a row lock on r in an open transaction (an UPDATE that changes
// nothing, which locks in every engine) until the returned function is called.
func (e *env) lockRow(r outbox.Record) func() {
	e.t.Helper()
	tx, err := e.h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	where := "id = " + e.h.Placeholder(1)
	if e.h.RowWhere != nil {
		where = e.h.RowWhere(r.Lane)
	}
	if _, err := tx.ExecContext(e.ctx, "UPDATE "+e.outboxTable()+" SET attempts = attempts WHERE "+where, r.ID[:]); err != nil {
		_ = tx.Rollback()
		e.t.Fatalf("lock row: %v", err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback() }) }
	e.t.Cleanup(release)
	return release
}

// An unordered claim skips a row another transaction has locked instead of waiting.
func testClaimSkipsLocked(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2, r3 := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2, r3)
	release := e.lockRow(r1)
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	got, err := e.store.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: at(0), Until: at(time.Minute), Token: outbox.NewToken()}, nil)
	if err != nil {
		t.Fatalf("Claim with a locked row: %v (a claim must skip locked rows, not wait for them)", err)
	}
	sameIDs(t, "claim around a locked row", ids(got), idsOf(r2, r3))
	release()
	_, got2 := e.claimUnordered(10, at(0), at(time.Minute))
	sameIDs(t, "claim after the lock is released", ids(got2), idsOf(r1))
}

// An unordered claim with After takes only rows with greater IDs, in ID order; the rows
// behind the cursor stay eligible for a claim from the start.
func testClaimAfter(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.insertNew(5)
	until := at(time.Minute)
	got := e.claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 2, Now: at(0), Until: until, Token: outbox.NewToken(), After: recs[1].ID})
	sameIDs(t, "claim after the second row (limit 2)", ids(got), idsOf(recs[2:4]...))
	got = e.claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: at(0), Until: until, Token: outbox.NewToken(), After: recs[4].ID})
	sameIDs(t, "claim after the last row", ids(got), nil)
	got = e.claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: at(0), Until: until, Token: outbox.NewToken()})
	sameIDs(t, "claim from the start", ids(got), idsOf(recs[0], recs[1], recs[4]))
}

// A lane is always read from its head: After with a lane is refused, and nothing is
// claimed.
func testClaimAfterLane(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewOrderedRecord(at(0), "key", testLanes)
	e.insert(r)
	lease := e.acquire(r.Lane)
	got, err := e.store.Claim(e.ctx, outbox.ClaimParams{Lane: r.Lane, Limit: 1, Now: at(0), Until: at(time.Minute),
		Token: outbox.NewToken(), Lease: lease, After: outbox.NewID()}, nil)
	if err == nil || len(got) != 0 {
		t.Fatalf("Claim(lane %d, After set) = %d rows, %v; want an error", r.Lane, len(got), err)
	}
	if !strings.Contains(err.Error(), "After") {
		t.Errorf("error %q does not name After", err)
	}
	if got := e.claim(outbox.ClaimParams{Lane: r.Lane, Limit: 1, Now: at(0), Until: at(time.Minute), Token: outbox.NewToken(), Lease: lease}); len(got) != 1 {
		t.Fatalf("claim of the lane after the refused one = %d rows, want 1", len(got))
	}
}

// A writer's open transaction holding many new rows (a multi-row INSERT, or bulk copy
// where the dialect has one) holds up no claimer and no probe: the unordered claim,
// LockBatch, Read, Count, Stats, PendingLanes and MaxLane answer at once, with the
// committed rows only. (SQL Server: READPAST skips row locks, not page locks; the
// outbox's indexes allow none.)
func testClaimOpenWriter(t *testing.T, h Harness) {
	e := newEnv(t, h)
	committed := e.insertNew(10)
	lane := e.laneRows(3, 2)
	tx, err := h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	open := newRecords(200) // above SQL Server's bulk copy threshold
	key := keysInLane(5, testLanes, 1)[0]
	for range 50 {
		open = append(open, laneRecord(key, at(0)))
	}
	if err := e.store.Insert(e.ctx, tx, open); err != nil {
		t.Fatalf("Insert in the open transaction: %v", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	waited := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s beside an open multi-row writer: %v (it must not wait for the writer's transaction)", what, err)
		}
	}
	got, err := e.store.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: at(0)}, make([]outbox.Record, 500))
	waited("Read", err)
	sameIDs(t, "Read", ids(got), ids(committed))
	n, err := e.store.Count(ctx, at(0))
	waited("Count", err)
	if n != 12 {
		t.Fatalf("Count = %d, want 12 (the committed rows)", n)
	}
	_, err = e.store.Stats(ctx, at(0))
	waited("Stats", err)
	lanes, err := e.store.PendingLanes(ctx)
	waited("PendingLanes", err)
	if !slices.Contains(lanes, 3) {
		t.Fatalf("PendingLanes = %v, want lane 3 among them", lanes)
	}
	maxLane, err := e.store.MaxLane(ctx)
	waited("MaxLane", err)
	if maxLane < lane[0].Lane {
		t.Fatalf("MaxLane = %d, want at least %d", maxLane, lane[0].Lane)
	}
	claimed, err := e.store.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 500, Now: at(0), Until: at(time.Minute), Token: outbox.NewToken()}, nil)
	waited("Claim", err)
	sameIDs(t, "Claim", ids(claimed), ids(committed))
	if bl, ok := e.store.(outbox.BatchLocker); ok {
		b := e.lockBatch(bl, ctx, 500, at(2*time.Minute))
		sameIDs(t, "LockBatch once the claims expired", ids(b.Records()), ids(committed))
		rollback(t, b)
	}
}
