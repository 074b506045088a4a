package outboxtest

import (
	"context"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// An application's AFTER triggers on the rows table (an audit, a replication feed)
// doing DML of their own change no count a store returns: each is the number of rows
// the store's own statement changed. A driver that adds up every count of a request
// (go-mssqldb does, triggers' statements included) would otherwise make a lane's
// fenced delete report more rows than it was given, which a forwarder reads as a lost
// lease, and a trigger writing even when nothing changed would make a refused Fail
// look done.
func triggerTests() []subtest {
	return []subtest{
		{"UnorderedCountsExact", testTriggerUnorderedCounts},
		{"ParkedCountsExact", testTriggerParkedCounts},
		{"LaneRunsFlow", testTriggerLaneRuns},
	}
}

// auditedEnv is newEnv with the harness's audit triggers on the rows table, and a
// function returning how many rows they have written so far.
func auditedEnv(t *testing.T, h Harness) (*env, func() int64) {
	t.Helper()
	if h.AuditTriggers == nil {
		t.Fatalf("Harness %q lacks AuditTriggers: the Triggers rules need the dialect's AFTER triggers on the rows table", h.Name)
	}
	e := newEnv(t, h)
	name := e.opts.TablePrefix + "audit"
	audit := e.table(name)
	e.exec("CREATE TABLE " + audit + " (op VARCHAR(16) NOT NULL)")
	testenv.Cleanup(t, "drop the audit table", func(ctx context.Context) error {
		_, err := h.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+audit)
		return err
	})
	drop, err := h.AuditTriggers(e.ctx, h.DB, e.opts, audit)
	if err != nil {
		t.Fatalf("AuditTriggers: %v", err)
	}
	if drop != nil {
		testenv.Cleanup(t, "drop what AuditTriggers made", drop)
	}
	return e, func() int64 { return e.rawCount(name) }
}

// wantAudited fails unless the triggers wrote more rows since before (they fired).
func wantAudited(t *testing.T, what string, audited func() int64, before int64) int64 {
	t.Helper()
	now := audited()
	if now <= before {
		t.Fatalf("%s: the audit triggers wrote nothing (%d rows before, %d after): the rule would prove nothing", what, before, now)
	}
	return now
}

// Claim, Renew, Release, Complete and Fail of unordered rows return the store's own
// counts under triggers, for live and for stale tokens; bulk inserts fire them too.
func testTriggerUnorderedCounts(t *testing.T, h Harness) {
	e, audited := auditedEnv(t, h)
	e.insertNew(70) // above SQL Server's bulk copy threshold (64 rows)
	seen := wantAudited(t, "Insert", audited, 0)
	until := at(time.Minute)
	tok, got := e.claimUnordered(5, at(0), until)
	if len(got) != 5 {
		t.Fatalf("Claim = %d rows, want 5", len(got))
	}
	wantN(t, "Renew of the 5 claimed rows", e.renew(outbox.RenewParams{Token: tok, Now: at(0), Until: at(2 * time.Minute), Lane: outbox.Unordered}), nil, 5)
	wantN(t, "Renew of 2 of them", e.renew(outbox.RenewParams{Token: tok, IDs: ids(got[:2]), Now: at(0), Until: at(3 * time.Minute), Lane: outbox.Unordered}), nil, 2)
	wantN(t, "Release of 1", e.release(outbox.ReleaseParams{Token: tok, IDs: idsOf(got[4]), Now: at(0), Lane: outbox.Unordered}), nil, 1)
	wantN(t, "Complete of the 5 (one released)", e.complete(outbox.CompleteParams{Token: tok, IDs: ids(got), Now: at(0), Lane: outbox.Unordered}), nil, 4)
	seen = wantAudited(t, "Renew, Release and Complete", audited, seen)
	wantN(t, "Complete again (nothing left)", e.complete(outbox.CompleteParams{Token: tok, IDs: ids(got), Now: at(0), Lane: outbox.Unordered}), nil, 0)
	wantN(t, "Renew of a token holding nothing", e.renew(outbox.RenewParams{Token: tok, Now: at(0), Until: until, Lane: outbox.Unordered}), nil, 0)
	wantN(t, "Release of a token holding nothing", e.release(outbox.ReleaseParams{Token: tok, Now: at(0), Lane: outbox.Unordered}), nil, 0)

	tok2, one := e.claimUnordered(1, at(0), until)
	if len(one) != 1 {
		t.Fatalf("Claim = %d rows, want 1", len(one))
	}
	f := outbox.FailParams{ID: one[0].ID, Token: tok2, Now: at(0), Error: "boom", Lane: outbox.Unordered}
	wantBool(t, "Fail with the live token", e.fail(f), nil, true)
	wantBool(t, "Fail again (the claim was released)", e.fail(f), nil, false)
	wantAudited(t, "Fail", audited, seen)
	if n := e.count(at(0)); n != 66 {
		t.Fatalf("Count = %d, want 66 (70 inserted, 4 completed)", n)
	}
}

// Park, Requeue and Purge return the store's own counts under triggers.
func testTriggerParkedCounts(t *testing.T, h Harness) {
	e, audited := auditedEnv(t, h)
	recs := e.insertNew(4)
	seen := wantAudited(t, "Insert", audited, 0)
	for _, r := range recs[:3] {
		e.park(r.ID, "poison", at(0))
	}
	ok, err := e.store.Park(e.ctx, recs[0].ID, "again", at(0))
	wantBool(t, "Park of a parked row", ok, err, false)
	seen = wantAudited(t, "Park", audited, seen)
	n, err := e.store.Requeue(e.ctx, outbox.ParkedFilter{IDs: idsOf(recs[0])})
	wantN(t, "Requeue of 1 id", n, err, 1)
	n, err = e.store.Requeue(e.ctx, outbox.ParkedFilter{IDs: idsOf(recs[0], recs[3])})
	wantN(t, "Requeue of ids not parked", n, err, 0)
	n, err = e.store.Purge(e.ctx, outbox.ParkedFilter{All: true})
	wantN(t, "Purge of all parked", n, err, 2)
	wantAudited(t, "Requeue and Purge", audited, seen)
	n, err = e.store.Purge(e.ctx, outbox.ParkedFilter{All: true})
	wantN(t, "Purge with nothing parked", n, err, 0)
	if n := e.count(far); n != 2 { // the requeued row is due at the database's now
		t.Fatalf("Count = %d, want 2", n)
	}
}

// A lane worker's runs (Head, then Complete fenced by the lease) delete exactly the
// run each time, so the lane drains in order under triggers; an ordered claim's
// Complete, a head row's Fail and the lease calls count right too.
func testTriggerLaneRuns(t *testing.T, h Harness) {
	e, audited := auditedEnv(t, h)
	recs := e.laneRows(3, 9)
	seen := wantAudited(t, "Insert", audited, 0)
	lease := e.acquire(3)
	var sent []outbox.ID
	for i := 0; ; i++ {
		run := e.head(3, 4, at(0), true)
		if len(run) == 0 {
			break
		}
		if i > len(recs) {
			t.Fatalf("lane 3 does not drain: run %d is %s", i, idList(ids(run)))
		}
		n := e.complete(outbox.CompleteParams{IDs: ids(run), Now: at(0), Lane: 3, Lease: lease})
		if n != len(run) {
			t.Fatalf("run %d: Complete fenced by the lease = %d, want %d (the run's length; a forwarder would stop the lane)", i, n, len(run))
		}
		sent = append(sent, ids(run)...)
	}
	sameIDs(t, "lane 3 drained run by run", sent, ids(recs))
	seen = wantAudited(t, "lane runs", audited, seen)

	more := e.laneRows(5, 3)
	lease5 := e.acquire(5)
	wantBool(t, "Fail of the head row", e.fail(outbox.FailParams{ID: more[0].ID, Now: at(0), Error: "x", Lane: 5, Lease: lease5}), nil, true)
	ok, err := e.store.ReleaseLease(e.ctx, 5, lease5)
	wantBool(t, "ReleaseLease", ok, err, true)
	wantBool(t, "Fail under the released lease", e.fail(outbox.FailParams{ID: more[0].ID, Now: at(0), Error: "x", Lane: 5, Lease: lease5}), nil, false)
	lease5 = e.acquire(5)
	tok, claimed := e.claimLane(5, 10, lease5, at(0), at(time.Minute))
	sameIDs(t, "ordered claim", ids(claimed), ids(more))
	wantN(t, "Complete of the ordered claim", e.complete(outbox.CompleteParams{Token: tok, IDs: ids(claimed), Now: at(0), Lane: 5, Lease: lease5}), nil, 3)
	wantAudited(t, "Fail and ordered Complete", audited, seen)
	ok, err = e.store.RenewLease(e.ctx, outbox.LeaseParams{Lane: 5, Owner: "outboxtest", Token: lease5, TTL: time.Hour})
	wantBool(t, "RenewLease", ok, err, true)
	ok, err = e.store.ReleaseLease(e.ctx, 5, lease5)
	wantBool(t, "ReleaseLease", ok, err, true)
	ok, err = e.store.ReleaseLease(e.ctx, 5, lease5)
	wantBool(t, "ReleaseLease again", ok, err, false)
	if n := e.rawCount(e.opts.OutboxTable()); n != 0 {
		t.Fatalf("%d rows left, want none", n)
	}
}
