package forwarder

import (
	"context"
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
