package forwarder

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// headCounter counts lane head reads and unordered locked batches made through it.
type headCounter struct {
	outbox.Store
	heads, batches atomic.Int64
}

func (c *headCounter) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	c.batches.Add(1)
	return c.Store.(outbox.BatchLocker).LockBatch(ctx, p)
}

func (c *headCounter) Head(ctx context.Context, q outbox.HeadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	c.heads.Add(1)
	return c.Store.Head(ctx, q, dst)
}

// A flood of wake-ups for every lane and the unordered rows ("*", 1,000 a second) with
// no rows behind them costs each held lane at most one head read per PollInterval, and
// each unordered claimer one locked batch, not one per wake-up.
// The rate is logged; the bound is a count of statements, which a slower machine only
// lowers.
func TestWakeUpFloodCoalesced(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb = tb.withLanes(t, 16)
		st := &headCounter{Store: tb.store}
		cfg := fastConfig()
		cfg.PollInterval, cfg.MaxPollInterval = 100*time.Millisecond, time.Second
		f, err := New(st, Targets{"": newRecorder()}, cfg, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitFor(t, 20*time.Second, "all 16 lanes held", func() bool { return len(f.Stats().HeldLanes) == 16 })
		all := outbox.Commit{Unordered: 1}
		for l := range 16 {
			all.Lanes = append(all.Lanes, l)
		}
		const flood = 2 * time.Second
		before, beforeBatches := st.heads.Load(), st.batches.Load()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		wakes := 0
		for end := time.Now().Add(flood); time.Now().Before(end); wakes++ {
			<-tick.C
			f.Notify(all)
		}
		reads, batches := st.heads.Load()-before, st.batches.Load()-beforeBatches
		t.Logf("%d wake-ups in %s: %d head reads (%.0f/s over 16 lanes), %d locked batches", wakes, flood, reads, float64(reads)/flood.Seconds(), batches)
		if bound := int64(16 * (int(flood/cfg.PollInterval) + 5)); reads > bound {
			t.Fatalf("%d head reads under %d wake-ups; want at most %d (one per lane per PollInterval)", reads, wakes, bound)
		}
		// Claimers (at most 3, the stores' hint) each one batch per PollInterval.
		if bound := int64(3 * (int(flood/cfg.PollInterval) + 5)); batches > bound {
			t.Fatalf("%d locked batches under %d wake-ups; want at most %d (one per claimer per PollInterval)", batches, wakes, bound)
		}
	})
}
