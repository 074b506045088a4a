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

// Every statement whose affected-row count a method returns turns NOCOUNT off first:
// go-mssqldb reads the count from DONE tokens, which NOCOUNT (a server's 'user
// options' can turn it on for every session) strips, so Complete, Renew, Fail and
// AcquireLease would all report 0.
func TestCountedStatements(t *testing.T) {
	q := newQueries(newNames(outbox.Options{}))
	for _, stmt := range []string{
		q.renew(0, false), q.renew(3, true), q.release(0, false), q.release(2, true),
		q.complete(2, false), q.complete(2, true), q.fail, q.failFenced, q.park,
		q.requeueAll, q.requeueKey, q.requeueNullKey, q.requeueIDs(2),
		q.purgeAll, q.purgeKey, q.purgeNullKey, q.purgeIDs(2),
		q.acquireLease, q.renewLease, q.releaseLease,
	} {
		if !strings.HasPrefix(stmt, "SET NOCOUNT OFF;\n") {
			t.Errorf("statement does not turn NOCOUNT off: %s", stmt)
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
