package forwarder

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// slowLeaseStore adds latency to the lease manager's statements, as a loaded database
// does (F4 measured 100-400 ms per statement on the loaded MariaDB).
type slowLeaseStore struct {
	outbox.Store
	delay time.Duration
}

func (s *slowLeaseStore) wait(ctx context.Context) error {
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowLeaseStore) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Heartbeat(ctx, owner, ttl)
}

func (s *slowLeaseStore) Members(ctx context.Context) ([]string, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Members(ctx)
}

func (s *slowLeaseStore) Leases(ctx context.Context) ([]outbox.Lease, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Leases(ctx)
}

// R7: since 621c03d a lease round acquires lanes only while time.Now() is before the
// next renewal. When LeaseTTL/3 <= MaxPollInterval every round is a renewal round (the
// 2 s lease of TestE2E_ThreeForwardersShortLease with the default 1 s MaxPollInterval:
// 667 ms), and once heartbeat + renewals + members + leases take longer than LeaseTTL/3
// on a slow database, no round ever gets to acquire a lane: lanes handed over or lost
// stay unowned and their rows are never sent.
//
// Here the three statements take 120 ms each (360 ms) against LeaseTTL/3 = 300 ms.
func TestReviewLanesAcquiredOnSlowDatabase(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		key := keyInLane(1, tb.opts.Lanes, 0)
		tb.insert(t, tb.row("t", key, key+"/0"))
		rec := newRecorder()
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.LeaseTTL = 900 * time.Millisecond
		cfg.MaxPollInterval = time.Second // renewal rounds only (LeaseTTL/3 < MaxPollInterval)
		f, _ := start(t, &slowLeaseStore{Store: tb.store, delay: 120 * time.Millisecond}, Targets{"": rec}, cfg)
		deadline := time.Now().Add(15 * time.Second)
		for len(f.Stats().HeldLanes) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("R7: no lane acquired in 15 s: every lease round spent its time before the next renewal on heartbeat, members and leases")
			}
			time.Sleep(20 * time.Millisecond)
		}
		waitFor(t, 15*time.Second, "the keyed row sent", func() bool { return len(rec.got()) == 1 })
	})
}

// acquireStore delays every lease acquisition (a loaded database), counts the
// acquisitions on the wire at once, and fails the first acquisition of lane failLane
// with a connection error.
type acquireStore struct {
	outbox.Store
	delay    time.Duration
	failLane int
	failed   atomic.Bool
	now, max atomic.Int64
}

func (s *acquireStore) AcquireLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for m := s.max.Load(); n > m && !s.max.CompareAndSwap(m, n); m = s.max.Load() {
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if l.Lane == s.failLane && s.failed.CompareAndSwap(false, true) {
		return false, &outbox.RetryableError{Err: errors.New("connection reset (simulated)")}
	}
	return s.Store.AcquireLease(ctx, l)
}

// A forwarder takes its lanes leaseConcurrency at a time (a loaded database answered
// 64 acquisitions one after the other in 126–183 ms), never more at once; when one
// acquisition of a wave fails, the lanes the others acquired get their workers (no lease
// stays taken with nobody sending until it expires) and the failed lane is taken in a
// later round.
func TestLeasesAcquiredConcurrently(t *testing.T) {
	const lanes = 32
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			tb := newTable(t, d, lanes)
			st := &acquireStore{Store: tb.store, delay: 20 * time.Millisecond, failLane: 3}
			cfg := fastConfig()
			cfg.DisableUnordered = true
			cfg.Owner = "acquirer"
			cfg.LeaseTTL = time.Minute // a lease left without a worker would block its lane past the wait
			f, _ := start(t, st, Targets{"": newRecorder()}, cfg)
			waitFor(t, 10*time.Second, "every lane held", func() bool { return len(f.Stats().HeldLanes) == lanes })
			if !st.failed.Load() {
				t.Fatal("lane 3's acquisition never failed")
			}
			if got := st.max.Load(); got != leaseConcurrency {
				t.Fatalf("%d acquisitions at most on the wire at once, want %d", got, leaseConcurrency)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			leases, err := tb.store.Leases(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held := f.Stats().HeldLanes
			for _, l := range leases {
				if l.Live && l.Owner == cfg.Owner && !slices.Contains(held, l.Lane) {
					t.Errorf("lane %d is leased to the forwarder but has no worker", l.Lane)
				}
			}
		})
	}
}
