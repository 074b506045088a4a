package forwarder_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestE2E_ThreeForwardersOneTable: 3 forwarders share one table with 64 lanes; 4
// concurrent writers publish 20,000 messages over 100 ordering keys while they run.
// Every message is delivered, per-key order holds (first deliveries of a key come in
// write order), and duplicates are reported.
func TestE2E_ThreeForwardersOneTable(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testThreeForwarders(t, e)
		})
	}
}

// TestE2E_ThreeForwardersShortLease is the same with LeaseTTL 2 s (lanes move between
// forwarders while rows are in flight, as in the crash test), 6,000 messages on MariaDB,
// and a progress window (10 s) shorter than the default ClaimTTL (30 s): a lane worker
// that stops without giving back the head rows it claimed stalls its lane past it.
func TestE2E_ThreeForwardersShortLease(t *testing.T) {
	testThreeForwardersWith(t, chaos.MariaDB, 6000, 2*time.Second, 10*time.Second)
}

func testThreeForwarders(t *testing.T, e chaos.Engine) {
	testThreeForwardersWith(t, e, 20000, 0, 20*time.Second)
}

func testThreeForwardersWith(t *testing.T, e chaos.Engine, total int, leaseTTL, idle time.Duration) {
	const (
		lanes      = 64
		keys       = 100
		writers    = 4
		forwarders = 3
	)
	db, _ := e.Open(t)
	store := e.Table(t, db, lanes)
	rec := chaos.NewRecorder()
	target := &chaos.RecordingPublisher{Recorder: rec}

	fwds := make([]*forwarder.Forwarder, forwarders)
	for i := range fwds {
		fwds[i] = chaos.NewForwarder(t, store, forwarder.Targets{"": target}, forwarder.Config{
			Owner:    fmt.Sprintf("fwd-%d", i),
			LeaseTTL: leaseTTL,
		})
		chaos.RunForwarder(t, fwds[i])
	}
	// One writer process in real life would link its own forwarder; here the writers
	// notify the first one, the others find their lanes by polling.
	ob, err := publisher.New(store, publisher.Config{Notifier: fwds[0]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := chaos.KeyedMessages(total, keys, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	ws, err := chaos.WriteAll(ctx, ob, db, "orders", msgs, writers, 50)
	if err != nil {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	ok := rec.WaitUnique(total, idle, 90*time.Second)
	took := time.Since(start)
	t.Logf("%s: wrote %d in %s (%d retried txs), all delivered=%v after %s (%.0f msg/s end to end)",
		e.Name, total, wrote.Round(time.Millisecond), ws.Retries, ok, took.Round(time.Millisecond), float64(total)/took.Seconds())
	chaos.CheckDelivered(t, rec, chaos.UUIDsOf(msgs))

	// The lanes are shared: every forwarder holds its share, give or take one or two.
	// Sharing settles through the members' heartbeats and lease renewals, which a fast
	// drain can outrun, so it is awaited (within a few lease periods) rather than
	// sampled the moment the last message arrives.
	per := map[string]int{}
	balanced := func() bool {
		leases, err := store.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		clear(per)
		now := time.Now()
		for _, l := range leases {
			if l.ExpiresAt.After(now) {
				per[l.Owner]++
			}
		}
		for i := range fwds {
			if n := per[fmt.Sprintf("fwd-%d", i)]; n < lanes/forwarders-1 || n > lanes/forwarders+2 {
				return false
			}
		}
		return true
	}
	settle := 20 * time.Second
	if leaseTTL > 0 {
		settle = 10 * leaseTTL
	}
	deadline := time.Now().Add(settle)
	for !balanced() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("live leases per owner: %v", per)
	if !balanced() {
		t.Errorf("lanes not shared within %s: %v, want each within one of %d", settle, per, lanes/forwarders)
	}
	e.WaitEmpty(t, db, store.Options(), 10*time.Second)
}
