package outboxtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func argumentTests() []subtest {
	return []subtest{
		{"Invalid", testInvalidArguments},
		{"EmptyIDListSelectsNothing", testEmptyIDList},
	}
}

// Every call the contract forbids fails, on every dialect, with an error wrapping
// outbox.ErrInvalidArgument that names the parameter, and changes nothing.
func testInvalidArguments(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.insertNew(3)
	s, ctx, now := e.store, e.ctx, at(0)
	tok := outbox.NewToken()
	later := now.Add(time.Minute)
	claim := func(c outbox.ClaimParams) error { _, err := s.Claim(ctx, c, nil); return err }
	k := "k"
	checks := []struct {
		name, contains string
		err            error
	}{
		{"Claim Limit 0", "Limit", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 0, Now: now, Until: later, Token: tok})},
		{"Claim Limit -1", "Limit", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: -1, Now: now, Until: later, Token: tok})},
		{"Claim zero Token", "Token", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 1, Now: now, Until: later})},
		{"Claim Until not after Now", "Until", claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: 1, Now: now, Until: now, Token: tok})},
		{"Claim lane out of range", "lane", claim(outbox.ClaimParams{Lane: testLanes, Limit: 1, Now: now, Until: later, Token: tok, Lease: tok})},
		{"Claim After with a lane", "After", claim(outbox.ClaimParams{Lane: 0, Limit: 1, Now: now, Until: later, Token: tok, Lease: tok, After: outbox.NewID()})},
		{"Read lane", "lane", func() error { _, err := s.Read(ctx, outbox.ReadQuery{Lane: -2}, make([]outbox.Record, 1)); return err }()},
		{"Renew lane", "lane", func() error {
			_, err := s.Renew(ctx, outbox.RenewParams{Token: tok, Lane: testLanes, Now: now, Until: later})
			return err
		}()},
		{"Complete lane", "lane", func() error {
			_, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{recs[0].ID}, Lane: testLanes + 1, Lease: tok, Now: now})
			return err
		}()},
		{"Release lane", "lane", func() error {
			_, err := s.Release(ctx, outbox.ReleaseParams{Token: tok, Lane: -3, Now: now})
			return err
		}()},
		{"Fail lane", "lane", func() error {
			_, err := s.Fail(ctx, outbox.FailParams{ID: recs[0].ID, Token: tok, Lane: -3, Now: now})
			return err
		}()},
		{"ListParked Limit 0", "Limit", func() error { _, err := s.ListParked(ctx, outbox.ParkedQuery{}); return err }()},
		{"Requeue without selector", "exactly one", func() error { _, err := s.Requeue(ctx, outbox.ParkedFilter{}); return err }()},
		{"Purge with two selectors", "exactly one", func() error {
			_, err := s.Purge(ctx, outbox.ParkedFilter{All: true, OrderingKey: &k})
			return err
		}()},
		{"AcquireLease Unordered", "lane", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: outbox.Unordered, Token: tok, TTL: time.Minute})
			return err
		}()},
		{"AcquireLease zero Token", "Token", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 0, TTL: time.Minute})
			return err
		}()},
		{"RenewLease zero TTL", "TTL", func() error {
			_, err := s.RenewLease(ctx, outbox.LeaseParams{Lane: 0, Token: tok})
			return err
		}()},
		{"AcquireLease TTL above MaxTTL", "TTL", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 0, Token: tok, TTL: outbox.MaxTTL + time.Second})
			return err
		}()},
		{"AcquireLease Owner not text", "Owner", func() error {
			_, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 0, Owner: "a\x00b", Token: tok, TTL: time.Minute})
			return err
		}()},
		{"ReleaseLease lane", "lane", func() error { _, err := s.ReleaseLease(ctx, testLanes, tok); return err }()},
		{"Heartbeat empty owner", "Owner", s.Heartbeat(ctx, "", time.Minute)},
		{"Heartbeat owner not UTF-8", "Owner", s.Heartbeat(ctx, "\xff", time.Minute)},
		{"Heartbeat negative TTL", "TTL", s.Heartbeat(ctx, "o", -time.Second)},
		{"Head Unordered", "lane", func() error {
			_, err := s.Head(ctx, outbox.HeadQuery{Lane: outbox.Unordered, Limit: 1, Now: now}, nil)
			return err
		}()},
		{"Head Limit 0", "Limit", func() error {
			_, err := s.Head(ctx, outbox.HeadQuery{Lane: 0, Now: now}, nil)
			return err
		}()},
		{"Leave empty owner", "Owner", s.Leave(ctx, "")},
	}
	for _, c := range checks {
		if !errors.Is(c.err, outbox.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.contains) {
			t.Errorf("%s: %v; want an error wrapping outbox.ErrInvalidArgument that names %s", c.name, c.err, c.contains)
		}
	}
	// Nothing changed: the rows are still there, unclaimed; no lease, no member.
	if n, err := s.Count(ctx, now); err != nil || n != int64(len(recs)) {
		t.Errorf("Count after the refused calls = %d, %v; want %d", n, err, len(recs))
	}
	if l, err := s.Leases(ctx); err != nil || len(l) != 0 {
		t.Errorf("Leases after the refused calls = %v, %v; want none", l, err)
	}
	if m, err := s.Members(ctx); err != nil || len(m) != 0 {
		t.Errorf("Members after the refused calls = %v, %v; want none", m, err)
	}
}

// A parked filter whose IDs is a non-nil empty list selects no row (it is the IDs
// selector, not a missing one).
func testEmptyIDList(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.parkedSet()
	if n, err := e.store.Requeue(e.ctx, outbox.ParkedFilter{IDs: []outbox.ID{}}); err != nil || n != 0 {
		t.Errorf("Requeue(empty IDs) = %d, %v; want 0, nil", n, err)
	}
	if n, err := e.store.Purge(e.ctx, outbox.ParkedFilter{IDs: []outbox.ID{}}); err != nil || n != 0 {
		t.Errorf("Purge(empty IDs) = %d, %v; want 0, nil", n, err)
	}
	if p := e.parked(); len(p) != len(s.all) {
		t.Fatalf("%d parked rows left, want %d", len(p), len(s.all))
	}
}
