package sqlserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Caller errors are reported before any I/O (the database here is unreachable, so an
// attempt to use it would fail differently and slowly).
func TestArgumentChecks(t *testing.T) {
	s, err := New(openUnreachable(t), outbox.Options{Lanes: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tok := outbox.NewToken()
	claim := func(c outbox.ClaimParams) error { _, err := s.Claim(ctx, c, nil); return err }
	checks := []struct {
		name     string
		err      error
		contains string
	}{
		{"claim limit", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 0, Now: now, Until: now.Add(time.Second), Token: tok}), "Limit must be at least 1"},
		{"claim token", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 1, Now: now, Until: now.Add(time.Second)}), "Token is zero"},
		{"claim until", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 1, Now: now, Until: now, Token: tok}), "is not after Now"},
		{"claim lane", claim(outbox.ClaimParams{Lane: 4, Limit: 1, Now: now, Until: now.Add(time.Second), Token: tok, Lease: tok}), "lane 4 out of range"},
		{"read lane", func() error { _, err := s.Read(ctx, outbox.ReadQuery{Lane: -2}, make([]outbox.Record, 1)); return err }(), "lane -2"},
		{"renew lane", func() error { _, err := s.Renew(ctx, outbox.RenewParams{Token: tok, Lane: 4}); return err }(), "lane 4"},
		{"complete lane", func() error {
			_, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{outbox.NewID()}, Lane: 9, Lease: tok})
			return err
		}(), "lane 9"},
		{"release lane", func() error { _, err := s.Release(ctx, outbox.ReleaseParams{Token: tok, Lane: 7}); return err }(), "lane 7"},
		{"fail lane", func() error { _, err := s.Fail(ctx, outbox.FailParams{Token: tok, Lane: -3}); return err }(), "lane -3"},
		{"list parked", func() error { _, err := s.ListParked(ctx, outbox.ParkedQuery{}); return err }(), "Limit must be at least 1"},
		{"requeue no selector", func() error { _, err := s.Requeue(ctx, outbox.ParkedFilter{}); return err }(), "exactly one"},
		{"purge two selectors", func() error {
			k := "k"
			_, err := s.Purge(ctx, outbox.ParkedFilter{All: true, OrderingKey: &k})
			return err
		}(), "exactly one"},
		{"acquire lane", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: -1, Token: tok, TTL: time.Minute})
			return err
		}(), "lane -1"},
		{"acquire token", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 0, TTL: time.Minute})
			return err
		}(), "Token is zero"},
		{"renew lease TTL", func() error {
			_, err := s.RenewLease(ctx, outbox.LeaseParams{Lane: 0, Token: tok})
			return err
		}(), "TTL"},
		{"head lane", func() error {
			_, err := s.Head(ctx, outbox.HeadQuery{Lane: outbox.Unordered, Limit: 1}, nil)
			return err
		}(), "lane -1"},
		{"owner length", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 0, Owner: strings.Repeat("o", 401), Token: tok, TTL: time.Minute})
			return err
		}(), "401 UTF-16 code units"},
		{"heartbeat owner", s.Heartbeat(ctx, "\xff", time.Minute), "UTF-8"},
		{"release lane", func() error { _, err := s.ReleaseLease(ctx, 4, tok); return err }(), "lane 4"},
	}
	for _, c := range checks {
		if c.err == nil || !strings.Contains(c.err.Error(), c.contains) || !errors.Is(c.err, outbox.ErrInvalidArgument) {
			t.Errorf("%s: error %v, want one wrapping outbox.ErrInvalidArgument containing %q", c.name, c.err, c.contains)
		}
	}
	// Nothing to do is no error and no I/O.
	if n, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, Now: now, Lane: outbox.Unordered}); n != 0 || err != nil {
		t.Errorf("Complete without ids = %d, %v", n, err)
	}
	if n, err := s.Renew(ctx, outbox.RenewParams{Token: tok, IDs: []outbox.ID{}, Now: now, Until: now, Lane: outbox.Unordered}); n != 0 || err != nil {
		t.Errorf("Renew with an empty id list = %d, %v", n, err)
	}
	if got, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered}, nil); len(got) != 0 || err != nil {
		t.Errorf("Read into nothing = %v, %v", got, err)
	}
}

func TestChunkIDs(t *testing.T) {
	ids := make([]outbox.ID, 2*maxIDsPerStatement+1)
	var sizes []int
	n, err := chunkIDs(ids, func(part []outbox.ID) (int, error) { sizes = append(sizes, len(part)); return len(part), nil })
	if err != nil || n != len(ids) || len(sizes) != 3 || sizes[0] != maxIDsPerStatement || sizes[2] != 1 {
		t.Fatalf("chunks %v, total %d, %v", sizes, n, err)
	}
	// 2,000 ids plus the other parameters of the widest statement (renew fenced: tok,
	// now, until, lane, lease) stay under SQL Server's 2,100.
	if maxIDsPerStatement+5 > 2100 {
		t.Fatal("id chunks too large")
	}
}

// Every statement whose row count a method returns selects the count as data, from
// its own OUTPUT rows: go-mssqldb adds up the DONE counts of every statement of a
// request, including those run by triggers on the table, so a trigger's DML would
// inflate Complete's, Renew's and a lane run's counts (Conformance/Triggers shows the
// rule on a live server). NOCOUNT is on, so no DONE token carries a count at all.
func TestCountedStatements(t *testing.T) {
	q := newQueries(newNames(outbox.Options{}))
	for _, stmt := range []string{
		q.renew(0, false), q.renew(3, true), q.release(0, false), q.release(2, true),
		q.complete(2, false), q.complete(2, true), q.completeLane(2), q.fail, q.failFenced, q.failLane, q.park,
		q.requeueAll, q.requeueKey, q.requeueNullKey, q.requeueIDs(2),
		q.purgeAll, q.purgeKey, q.purgeNullKey, q.purgeIDs(2),
		q.acquireLease, q.renewLease, q.releaseLease,
		q.inboxPrune, q.inboxAcquire, q.inboxRelease,
	} {
		lines := strings.Split(strings.TrimPrefix(stmt, readCommitted), "\n")
		if len(lines) != 4 || lines[0] != "SET NOCOUNT ON;" || lines[1] != "DECLARE @changed TABLE (n int NOT NULL);" ||
			lines[3] != "SELECT COUNT_BIG(*) FROM @changed;" || strings.Count(lines[2], " OUTPUT 1 INTO @changed") != 1 {
			t.Errorf("statement does not select its own count:\n%s", stmt)
			continue
		}
		// The OUTPUT clause belongs to the outer statement: before its WHERE, never in
		// a subquery's (the lease check) or a CTE's.
		dml := lines[2]
		out := strings.Index(dml, " OUTPUT ")
		switch {
		case strings.HasPrefix(dml, "MERGE "), strings.HasPrefix(dml, "WITH "):
			if !strings.HasSuffix(dml, " OUTPUT 1 INTO @changed;") {
				t.Errorf("MERGE or CTE without a final OUTPUT: %s", dml)
			}
		case strings.HasPrefix(dml, "UPDATE "), strings.HasPrefix(dml, "DELETE FROM "):
			if where := strings.Index(dml, " WHERE "); where != out+len(" OUTPUT 1 INTO @changed") || strings.Contains(dml[:out], "SELECT") {
				t.Errorf("OUTPUT is not the outer statement's, right before its WHERE: %s", dml)
			}
		default:
			t.Errorf("unexpected statement: %s", dml)
		}
	}
	// Statements whose counts nobody reads stay plain.
	for _, stmt := range []string{q.heartbeat, q.leave, q.lockedDelete(2), q.lockedClaim(2), q.lockedFail} {
		if strings.Contains(stmt, "@changed") {
			t.Errorf("uncounted statement selects a count: %s", stmt)
		}
	}
}

// Ordering keys are compared as bytes and by length: varbinary '=' ignores trailing
// zero bytes, so "a" and "a\x00" (61 00 and 61 00 00 00 in UTF-16) would otherwise match.
func TestSameKeyComparesLength(t *testing.T) {
	got := sameKey("o.ordering_key", "@key")
	want := "CAST(o.ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(o.ordering_key) = DATALENGTH(@key)"
	if got != want {
		t.Fatalf("sameKey = %s\nwant      %s", got, want)
	}
}

// Every statement with READPAST pins READ COMMITTED first (READPAST is refused under
// SERIALIZABLE and SNAPSHOT, error 650, which a pooled session may carry), except
// LockBatch's read, whose transaction is begun READ COMMITTED. Each has parameters,
// so that go-mssqldb sends it through sp_executesql and the SET ends with it
// (InboxStats' bounded reads all have parameters).
func TestReadPastPinsReadCommitted(t *testing.T) {
	q := newQueries(newNames(outbox.Options{}))
	for _, stmt := range allQueries(q) {
		if !strings.Contains(stmt, "READPAST") || stmt == q.lockUnordered {
			continue
		}
		if !strings.HasPrefix(stmt, readCommitted) {
			t.Errorf("READPAST without READ COMMITTED pinned first:\n%s", stmt)
		}
		if !strings.Contains(stmt, "@") {
			t.Errorf("statement without parameters: its SET would outlive it on the session:\n%s", stmt)
		}
	}
}

// A lane's reads never skip a locked row (issue 36, 42): Head's run and parked-key
// reads, Read of a lane and the ordered claims read without READPAST, so a head row
// another session has locked holds the lane instead of letting the rows behind it go
// first. The unordered claim and LockBatch do skip.
func TestLaneReadsNeverSkipLockedRows(t *testing.T) {
	q := newQueries(newNames(outbox.Options{}))
	for name, stmt := range map[string]string{
		"laneRun": q.laneRun, "parkedKeys": q.parkedKeys, "readLane": q.readLane,
		"claimLane": q.claimLane, "claimLaneHold": q.claimLaneHold,
	} {
		if strings.Contains(stmt, "READPAST") {
			t.Errorf("%s skips locked rows:\n%s", name, stmt)
		}
		if !strings.Contains(stmt, "READCOMMITTEDLOCK") {
			t.Errorf("%s is not a locking read (under READ_COMMITTED_SNAPSHOT it would read past a lock holder's change):\n%s", name, stmt)
		}
	}
	for name, stmt := range map[string]string{"claimUnordered": q.claimUnordered, "lockUnordered": q.lockUnordered, "readUnordered": q.readUnordered} {
		if !strings.Contains(stmt, "READPAST") {
			t.Errorf("%s does not skip locked rows:\n%s", name, stmt)
		}
	}
}

// The probes that must not wait behind writers' open transactions under locking READ
// COMMITTED: the lane scout's and the inbox stats skip locked rows, MaxLane takes no
// locks at all (it must see every row, and may see uncommitted ones).
func TestProbesDoNotWaitForWriters(t *testing.T) {
	q := newQueries(newNames(outbox.Options{}))
	for name, stmt := range map[string]string{"nextPendingLane": q.nextPendingLane, "inboxNextConsumer": q.inboxNextConsumer,
		"inboxConsumer": q.inboxConsumer, "count": q.count, "stats": q.stats} {
		if !strings.Contains(stmt, skipLocked) {
			t.Errorf("%s waits for locked rows:\n%s", name, stmt)
		}
	}
	if strings.Count(q.maxLane, "WITH (READUNCOMMITTED)") != 2 || strings.Contains(q.maxLane, "READPAST") {
		t.Errorf("maxLane must read both halves without locks and without skipping:\n%s", q.maxLane)
	}
}
