package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxtest"
)

// recordAt commits entries for consumer processed at at.
func recordAt(t testing.TB, e *inboxtest.Env, consumer string, at time.Time, uuids ...string) {
	t.Helper()
	tx, err := e.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uuids {
		if _, err := e.Store.RecordInbox(context.Background(), tx, consumer, u, at); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func uuids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

type fakeMetrics struct {
	mu      sync.Mutex
	pruned  int
	entries []outbox.InboxStats
}

func (*fakeMetrics) Recorded(string)  {}
func (*fakeMetrics) Duplicate(string) {}
func (m *fakeMetrics) Pruned(n int)   { m.mu.Lock(); m.pruned += n; m.mu.Unlock() }
func (m *fakeMetrics) Entries(s outbox.InboxStats) {
	m.mu.Lock()
	m.entries = append(m.entries, s)
	m.mu.Unlock()
}

// A round deletes every entry older than the window in batches and keeps the others;
// another instance meanwhile does nothing (the lease).
func TestCleanerPrunesOutsideWindow(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		recordAt(t, e, "a", now.Add(-48*time.Hour), uuids("old", 25)...)
		recordAt(t, e, "b", now.Add(-25*time.Hour), uuids("old", 5)...)
		recordAt(t, e, "a", now.Add(-23*time.Hour), uuids("new", 7)...)
		m := &fakeMetrics{}
		cfg := inbox.CleanerConfig{Window: 24 * time.Hour, BatchSize: 4, BatchPause: -1, Metrics: m, Now: func() time.Time { return now }}
		c1, err := inbox.NewCleaner(e.Store, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Owner = "second"
		c2, err := inbox.NewCleaner(e.Store, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		n, err := c1.RunOnce(ctx)
		if err != nil || n != 30 {
			t.Fatalf("RunOnce = %d, %v; want 30", n, err)
		}
		recordAt(t, e, "a", now.Add(-30*time.Hour), "late")
		if n, err := c2.RunOnce(ctx); err != nil || n != 0 {
			t.Fatalf("second instance while the first holds the lease: %d, %v; want 0", n, err)
		}
		if got := e.InboxRows(t); got != 8 {
			t.Fatalf("%d entries left; want 8", got)
		}
		if m.pruned != 30 || len(m.entries) != 1 || m.entries[0].Entries() != 7 {
			t.Fatalf("metrics: pruned %d, entries %+v", m.pruned, m.entries)
		}
		// Stop gives the lease up: the second instance takes over at once. Start runs a
		// round at once, which may prune "late" before Stop ends it; "after-stop" is
		// recorded once c1 has stopped, so c2 has at least one entry to prune.
		if err := c1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		recordAt(t, e, "a", now.Add(-30*time.Hour), "after-stop")
		outside := e.InboxRows(t) - 7 // the 7 "new" entries are inside the window
		if n, err := c2.RunOnce(ctx); err != nil || n != outside {
			t.Fatalf("second instance after Stop: %d, %v; want %d", n, err, outside)
		}
	})
}

func TestCleanerConfigValidate(t *testing.T) {
	for _, cfg := range []inbox.CleanerConfig{{Window: -time.Hour}, {BatchSize: -1}, {LeaseTTL: time.Millisecond}, {Interval: -1}} {
		if _, err := inbox.NewCleaner(nopInbox{}, cfg, nil); !errors.Is(err, outbox.ErrInvalidOptions) {
			t.Errorf("NewCleaner(%+v) = %v; want ErrInvalidOptions", cfg, err)
		}
	}
}

type nopInbox struct{ outbox.Inbox }
