package forwarder

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// membersGate blocks the first Members call that follows a ListParked (the lease
// manager's renewal round: heartbeat, renewals, parked lanes, then members and leases)
// until open is closed, to hold the manager between its parked-lanes listing and its
// lease acquisition.
type membersGate struct {
	outbox.Store
	listed  atomic.Int64
	held    atomic.Bool
	blocked chan struct{}
	open    chan struct{}
}

func (g *membersGate) ListParked(ctx context.Context, q outbox.ParkedQuery) ([]outbox.Record, error) {
	recs, err := g.Store.ListParked(ctx, q)
	g.listed.Add(1)
	return recs, err
}

func (g *membersGate) Members(ctx context.Context) ([]string, error) {
	if g.listed.Load() > 0 && g.held.CompareAndSwap(false, true) {
		close(g.blocked)
		<-g.open
	}
	return g.Store.Members(ctx)
}

// R3: with StopLaneOnPoison a forwarder learns which lanes hold parked rows from
// refreshParkedLanes. In a renewal round the lease manager lists parked rows first and
// reads the leases later; in a round without renewal it lists them after reading the
// leases. A lane whose previous holder parks a row and hands the lane over between the
// listing and the lease read is taken over by a forwarder that does not know the lane
// is stopped: it sends the rows behind the parked one.
//
// Forwarder a holds all 8 lanes, its worker of lane 5 has poison row P in the handler.
// Forwarder b joins; its first round (a renewal round) lists no parked rows and is held
// before reading members. a hands lanes 4-7 over; P fails, is parked (MaxAttempts 1),
// lane 5 stops and its lease is released. Then b's round goes on: it acquires lane 5 and
// must not send R (behind P in lane 5).
func TestReviewStopLaneOnPoisonHandoverRace(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		const lane = 5
		key := keyInLane(lane, tb.opts.Lanes, 0)
		p := tb.row("t", key, "poison")
		r := tb.row("t", key, "behind")
		tb.insert(t, p, r)

		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.StopLaneOnPoison = true
		cfg.MaxAttempts = 1
		cfgA, cfgB := cfg, cfg
		cfgA.Owner, cfgB.Owner = "a", "b"

		recA := newRecorder()
		inHandler := make(chan struct{})
		release := make(chan struct{})
		var once atomic.Bool
		recA.fail = func(_ string, m *message.Message) error {
			if string(m.Payload) == "poison" {
				if once.CompareAndSwap(false, true) {
					close(inHandler)
				}
				<-release
				return errors.New("review: poison")
			}
			return nil
		}
		a, _ := start(t, tb.store, Targets{"": recA}, cfgA)
		waitFor(t, 20*time.Second, "a holds every lane", func() bool { return len(a.Stats().HeldLanes) == tb.opts.Lanes })
		select {
		case <-inHandler:
		case <-time.After(20 * time.Second):
			t.Fatal("poison row never reached a's handler")
		}

		gate := &membersGate{Store: tb.store, blocked: make(chan struct{}), open: make(chan struct{})}
		recB := newRecorder()
		b, _ := start(t, gate, Targets{"": recB}, cfgB)
		select {
		case <-gate.blocked:
		case <-time.After(20 * time.Second):
			t.Fatal("b's renewal round never listed parked rows")
		}
		// a sees b's heartbeat and hands lanes 4-7 over; lane 5 waits for its row in flight.
		waitFor(t, 20*time.Second, "a hands lanes over", func() bool { return len(a.Stats().HeldLanes) < tb.opts.Lanes-1 })
		close(release) // P fails and is parked; a's lane 5 stops and releases its lease
		waitFor(t, 20*time.Second, "P parked and lane 5 released by a", func() bool {
			if len(tb.parked(t)) != 1 || slices.Contains(a.Stats().HeldLanes, lane) {
				return false
			}
			leases, err := tb.store.Leases(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range leases {
				if l.Lane == lane && l.Owner == "a" && l.ExpiresAt.After(time.Now()) && !l.Token.IsZero() {
					return false
				}
			}
			return true
		})
		listedBefore := gate.listed.Load()
		close(gate.open)
		waitFor(t, 20*time.Second, "b takes lane 5", func() bool { return slices.Contains(b.Stats().HeldLanes, lane) })
		// b's next renewal round lists the parked row; by then a correct b never sent R.
		waitFor(t, 20*time.Second, "b lists parked rows again", func() bool { return gate.listed.Load() > listedBefore })
		for _, m := range recB.got() {
			if string(m.msg.Payload) == "behind" {
				t.Fatal("R3: b sent the row behind a parked row of a lane stopped on poison (took the lane over between its parked listing and its lease read)")
			}
		}
	})
}
