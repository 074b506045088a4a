package forwarder

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// seqOf reads the per-key sequence number a test put in the payload ("key/seq").
func seqOf(t testing.TB, m *message.Message) (string, int) {
	t.Helper()
	key, n, ok := strings.Cut(string(m.Payload), "/")
	if !ok {
		t.Fatalf("payload %q", m.Payload)
	}
	i, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	return key, i
}

// One forwarder: every message of every key arrives, in per-key order.
func TestOrderedPerKeyOrder(t *testing.T) {
	testOrderedPerKeyOrder(t)
}

func testOrderedPerKeyOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		const keys, per = 20, 25
		tb.insert(t, tb.keyedRows("key-", keys, per)...)
		cfg := fastConfig()
		_, _ = start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 30*time.Second, "all messages", func() bool { return len(rec.got()) >= keys*per })
		// At least once: a replay (a row resent after its lease was lost on a loaded
		// machine) is a duplicate, not a violation; a gap is.
		_, dups := checkKeyOrder(t, rec.got())
		if dups > 0 {
			t.Logf("%d duplicates (at least once)", dups)
		}
		waitFor(t, 5*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
	})
}

// A failing target: each nack backs off (attempts counted, no hot loop), then the row is
// sent; in its lane the rows behind it wait for it.
func TestNackBackoffThenSuccess(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		key := keyInLane(2, tb.opts.Lanes, 0)
		flakyU := tb.row("t", "", "flaky-u")
		flakyO := tb.row("t", key, key+"/0")
		behind := tb.row("t", key, key+"/1")
		tb.insert(t, flakyU, flakyO, behind)
		const failures = 3
		var mu sync.Mutex
		calls := map[string][]time.Time{}
		rec.setFail(func(_ string, m *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls[m.UUID] = append(calls[m.UUID], time.Now())
			if len(calls[m.UUID]) <= failures && (m.UUID == flakyU.MessageUUID || m.UUID == flakyO.MessageUUID) {
				return errors.New("broker down")
			}
			return nil
		})
		cfg := fastConfig()
		cfg.RetryBase, cfg.RetryMax, cfg.RetryJitter = 40*time.Millisecond, 200*time.Millisecond, 0.01
		_, _ = start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "all sent", func() bool { return len(rec.got()) == 3 })
		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{flakyU.MessageUUID, flakyO.MessageUUID} {
			at := calls[id]
			if len(at) != failures+1 {
				t.Fatalf("%d publish calls for a row that failed %d times: want exactly %d (no hot loop)", len(at), failures, failures+1)
			}
			for i := 1; i < len(at); i++ {
				// backoff 40ms·2^(i-1) ±1%, never shorter than ~0.9 of it
				if min := time.Duration(float64(40*time.Millisecond<<(i-1)) * 0.9); at[i].Sub(at[i-1]) < min {
					t.Fatalf("retry %d after %s, want at least %s", i, at[i].Sub(at[i-1]), min)
				}
			}
		}
		got := rec.got()
		var order []string
		for _, p := range got {
			if p.row.OrderingKey == key {
				order = append(order, string(p.msg.Payload))
			}
		}
		if strings.Join(order, ",") != key+"/0,"+key+"/1" {
			t.Fatalf("lane order %v", order)
		}
		waitFor(t, 5*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
	})
}

// poisonFail fails every publish of the given message UUIDs.
func poisonFail(rec *recorder, uuids ...string) *sync.Map {
	counts := &sync.Map{}
	bad := map[string]bool{}
	for _, u := range uuids {
		bad[u] = true
	}
	rec.setFail(func(_ string, m *message.Message) error {
		if bad[m.UUID] {
			n, _ := counts.LoadOrStore(m.UUID, new(int))
			*(n.(*int))++
			return errors.New("poison")
		}
		return nil
	})
	return counts
}

// After MaxAttempts a row is parked, and everything else (its lane included) flows.
func TestMaxAttemptsParks(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		key := keyInLane(1, tb.opts.Lanes, 0)
		poisonU := tb.row("t", "", "poison-u")
		poisonO := tb.row("t", key, key+"/0")
		after := tb.row("t", key, key+"/1")
		other := tb.row("t", "", "other")
		tb.insert(t, poisonU, poisonO, after, other)
		counts := poisonFail(rec, poisonU.MessageUUID, poisonO.MessageUUID)
		cfg := fastConfig()
		cfg.MaxAttempts = 3
		f, _ := start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "poison parked, others sent", func() bool {
			return len(tb.parked(t)) == 2 && len(rec.got()) == 2
		})
		for _, p := range tb.parked(t) {
			if p.Attempts != 3 || !strings.Contains(p.LastError, "poison") {
				t.Errorf("parked row %s: attempts %d, error %q", p.ID, p.Attempts, p.LastError)
			}
		}
		for _, u := range []string{poisonU.MessageUUID, poisonO.MessageUUID} {
			if n, _ := counts.Load(u); *(n.(*int)) != 3 {
				t.Errorf("poison %s published %d times, want 3", u, *(n.(*int)))
			}
		}
		waitUnordered(t, f, func(s LaneSnapshot) bool { return s.Parked == 1 && s.Failed == 3 })
		waitFor(t, 5*time.Second, "only parked rows left", func() bool { return tb.rows(t) == 2 })
	})
}

// StopLaneOnPoison: the lane stops at its parked row (other lanes flow) until an
// operator requeues it; then the lane resumes in order.
func TestStopLaneOnPoison(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		key := keyInLane(4, tb.opts.Lanes, 0)
		sameLane := keyInLane(4, tb.opts.Lanes, 1)
		otherLane := keyInLane(5, tb.opts.Lanes, 0)
		poison := tb.row("t", key, key+"/0")
		after := tb.row("t", sameLane, sameLane+"/0")
		other := tb.row("t", otherLane, otherLane+"/0")
		tb.insert(t, poison, after, other)
		poisonFail(rec, poison.MessageUUID)
		cfg := fastConfig()
		cfg.MaxAttempts = 2
		cfg.StopLaneOnPoison = true
		cfg.ClaimTTL = 300 * time.Millisecond
		_, _ = start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "poison parked, other lane sent", func() bool {
			return len(tb.parked(t)) == 1 && len(rec.got()) == 1
		})
		// Many polls and a full claim expiry later, the lane still holds.
		time.Sleep(3 * cfg.ClaimTTL)
		if got := rec.got(); len(got) != 1 || got[0].msg.UUID != other.MessageUUID {
			t.Fatalf("sent %d messages while the lane is stopped", len(got))
		}
		rec.setFail(nil)
		if n, err := tb.store.Requeue(context.Background(), outbox.ParkedFilter{All: true}); err != nil || n != 1 {
			t.Fatalf("requeue: %d %v", n, err)
		}
		waitFor(t, 20*time.Second, "lane resumed", func() bool { return len(rec.got()) == 3 })
		got := rec.got()
		if got[1].msg.UUID != poison.MessageUUID || got[2].msg.UUID != after.MessageUUID {
			t.Fatalf("lane resumed out of order: %s, %s", got[1].msg.Payload, got[2].msg.Payload)
		}
	})
}

// HoldParkedKeys: the parked row's later rows wait, other keys of the same lane flow.
func TestHoldParkedKeys(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		a := keyInLane(6, tb.opts.Lanes, 0)
		b := keyInLane(6, tb.opts.Lanes, 1)
		a0 := tb.row("t", a, a+"/0")
		a1 := tb.row("t", a, a+"/1")
		b0 := tb.row("t", b, b+"/0")
		a2 := tb.row("t", a, a+"/2")
		b1 := tb.row("t", b, b+"/1")
		tb.insert(t, a0, a1, b0, a2, b1)
		poisonFail(rec, a0.MessageUUID)
		cfg := fastConfig()
		cfg.MaxAttempts = 2
		cfg.HoldParkedKeys = true
		_, _ = start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "key b sent", func() bool { return len(rec.got()) == 2 && len(tb.parked(t)) == 1 })
		time.Sleep(300 * time.Millisecond)
		got := rec.got()
		if len(got) != 2 || got[0].msg.UUID != b0.MessageUUID || got[1].msg.UUID != b1.MessageUUID {
			var s []string
			for _, p := range got {
				s = append(s, string(p.msg.Payload))
			}
			t.Fatalf("sent %v, want only key b in order", s)
		}
		if n := tb.rows(t); n != 3 {
			t.Fatalf("%d rows left, want the parked row and the two held ones", n)
		}
	})
}

// A scheduled row is not sent before it is due and is sent once due, ordered or not.
func TestScheduledRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		due := time.Now().Add(700 * time.Millisecond).UTC()
		u := tb.row("t", "", "u")
		u.DeliverAt = due
		o := tb.row("t", "sched-key", "o")
		o.DeliverAt = due
		now := tb.row("t", "", "now")
		tb.insert(t, u, o, now)
		_, _ = start(t, tb.store, Targets{"": rec}, fastConfig())
		waitFor(t, 10*time.Second, "all sent", func() bool { return len(rec.got()) == 3 })
		for _, p := range rec.got() {
			if p.msg.UUID != now.MessageUUID && p.at.Before(due) {
				t.Fatalf("scheduled row sent %s before it was due", due.Sub(p.at))
			}
		}
		if first := rec.got()[0]; first.msg.UUID != now.MessageUUID {
			t.Fatal("due row not sent first")
		}
	})
}

// pausedLeases stands for a forwarder process paused (SIGSTOP) past its lease: while
// paused, its lease renewals and heartbeats wait (they go through on resume, late),
// while the lane worker's clock runs on.
type pausedLeases struct {
	outbox.Store
	mu     sync.Mutex
	resume chan struct{} // nil when not paused
}

func (p *pausedLeases) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume = make(chan struct{})
}

func (p *pausedLeases) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

func (p *pausedLeases) wait(ctx context.Context) error {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pausedLeases) RenewLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := p.wait(ctx); err != nil {
		return false, err
	}
	return p.Store.RenewLease(ctx, l)
}

func (p *pausedLeases) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := p.wait(ctx); err != nil {
		return err
	}
	return p.Store.Heartbeat(ctx, owner, ttl)
}

// leaseLossSetup starts a forwarder holding a lane with two rows (its lease renewals
// pausable), and returns once the first row is inside the target's Publish (blocked on
// gate).
func leaseLossSetup(t *testing.T, tb *table) (f *Forwarder, rec *recorder, gate chan struct{}, lane int, ps *pausedLeases) {
	t.Helper()
	rec = newRecorder()
	gate = make(chan struct{})
	rec.gate = gate
	lane = 3
	key := keyInLane(lane, tb.opts.Lanes, 0)
	tb.insert(t, tb.row("t", key, key+"/0"), tb.row("t", key, key+"/1"))
	cfg := fastConfig()
	cfg.LeaseTTL = 2 * time.Second
	cfg.DisableUnordered = true
	ps = &pausedLeases{Store: tb.store}
	f, _ = start(t, ps, Targets{"": rec}, cfg)
	waitFor(t, 10*time.Second, "the first row in the target", func() bool { return rec.callCount() == 1 })
	return f, rec, gate, lane, ps
}

// expireAndTakeOver pauses the holder's renewals until lane's lease has expired on the
// database's clock, then takes the lane over for another owner (a real takeover, the
// only kind a store allows) and returns the new token.
func expireAndTakeOver(t *testing.T, tb *table, ps *pausedLeases, lane int) outbox.Token {
	t.Helper()
	ps.pause()
	thief := outbox.NewToken()
	waitFor(t, 20*time.Second, "the lease expired and taken over", func() bool {
		ok, err := tb.store.AcquireLease(context.Background(), outbox.LeaseParams{Lane: lane, Owner: "thief", Token: thief, TTL: time.Minute})
		return err == nil && ok
	})
	return thief
}

// takeOver makes the holder of lane lose its lease at once: its lease row is released
// with the holder's token (as if it had expired) and another owner acquires the lane.
// It returns the new owner's token.
func takeOver(t *testing.T, tb *table, lane int) outbox.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases, err := tb.store.Leases(ctx)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	for _, l := range leases {
		if l.Lane == lane {
			if _, err := tb.store.ReleaseLease(ctx, lane, l.Token); err != nil {
				t.Fatalf("takeover: %v", err)
			}
		}
	}
	thief := outbox.NewToken()
	ok, err := tb.store.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: "thief", Token: thief, TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("takeover: %v %v", ok, err)
	}
	return thief
}

func laneDropped(f *Forwarder, lane int) func() bool {
	return func() bool {
		for _, l := range f.Stats().HeldLanes {
			if l == lane {
				return false
			}
		}
		return true
	}
}

// A forwarder paused past its lease while another owner took the lane over: when it
// resumes it neither completes the row it was sending nor sends the lane's next row
// (its monotonic deadline passed; the store refuses the delete).
func TestLeaseLossFencing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		f, rec, gate, lane, ps := leaseLossSetup(t, tb)
		expireAndTakeOver(t, tb, ps, lane)
		rec.mu.Lock()
		rec.gate = nil
		rec.mu.Unlock()
		close(gate) // resume: the handler acks the first row
		ps.unpause()
		waitFor(t, 10*time.Second, "lane dropped", laneDropped(f, lane))
		time.Sleep(200 * time.Millisecond)
		if n := tb.rows(t); n != 2 {
			t.Fatalf("%d rows left: the fenced forwarder completed a row of a lane it lost", n)
		}
		if got := rec.got(); len(got) != 1 {
			t.Fatalf("the fenced forwarder sent %d messages, want only the one in flight", len(got))
		}
	})
}

// The store fences too: a holder that still believes its lease live after it was lost
// (here the lease row is released and taken by another owner behind its back) may send
// the rest of its run, but cannot delete any row of the lane, and stops it.
func TestLeaseLossStoreFencing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		f, rec, gate, lane, _ := leaseLossSetup(t, tb)
		takeOver(t, tb, lane)
		rec.mu.Lock()
		rec.gate = nil
		rec.mu.Unlock()
		close(gate)
		waitFor(t, 10*time.Second, "lane dropped", laneDropped(f, lane))
		time.Sleep(200 * time.Millisecond)
		if n := tb.rows(t); n != 2 {
			t.Fatalf("%d rows left: a forwarder completed rows of a lane it lost", n)
		}
		if got := rec.got(); len(got) > 2 {
			t.Fatalf("the fenced forwarder sent %d messages, want at most its run of 2", len(got))
		}
	})
}

// Close releases the leases and leaves: the remaining forwarder takes every lane within
// its membership check, long before the released leases would have expired.
func TestGracefulShutdownReleasesLeases(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		cfg := fastConfig()
		cfg.LeaseTTL = 6 * time.Second // an expiry-based takeover would need 6s
		cfg.DisableUnordered = true
		cfgA, cfgB := cfg, cfg
		cfgA.Owner, cfgB.Owner = "a", "b"
		a, stopA := start(t, tb.store, Targets{"": newRecorder()}, cfgA)
		recB := newRecorder()
		b, _ := start(t, tb.store, Targets{"": recB}, cfgB)
		half := tb.opts.Lanes / 2
		waitFor(t, 15*time.Second, "lanes shared", func() bool {
			return len(a.Stats().HeldLanes) == half && len(b.Stats().HeldLanes) == half
		})
		aLanes := a.Stats().HeldLanes
		stopA()
		closed := time.Now()
		leases, err := tb.store.Leases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			if l.Owner == "a" {
				t.Fatalf("lease of lane %d still held by the closed forwarder", l.Lane)
			}
		}
		members, _ := tb.store.Members(context.Background())
		if len(members) != 1 || members[0] != "b" {
			t.Fatalf("members after close: %v", members)
		}
		waitFor(t, 3*time.Second, "b holds every lane", func() bool { return len(b.Stats().HeldLanes) == tb.opts.Lanes })
		if took := time.Since(closed); took > cfg.LeaseTTL/2 {
			t.Fatalf("takeover took %s", took)
		}
		key := keyInLane(aLanes[0], tb.opts.Lanes, 0)
		tb.insert(t, tb.row("t", key, key+"/0"))
		waitFor(t, 5*time.Second, "row of a taken-over lane sent", func() bool { return len(recB.got()) == 1 })
	})
}

// A commit notified to a forwarder that does not hold its lane marks the lane pending:
// when the forwarder takes the lane over (here from a peer that left without reading
// it), its worker reads the lane at once instead of waiting for the lane scout's next
// look (30 s here). Before, the wake-up was dropped (seen as a rare failure of
// wakeup/brokertest's TestWakeUp on a loaded machine: a wake-up that arrived before the
// forwarder's first leases).
func TestNotifiedLaneReadOnTakeover(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb = tb.withLanes(t, 4)
		cfg := fastConfig()
		cfg.PollInterval, cfg.MaxPollInterval = 30*time.Second, 30*time.Second
		cfg.LeaseTTL = 3 * time.Second // the lease manager looks every second
		cfg.DisableUnordered = true
		cfgA, cfgB := cfg, cfg
		cfgA.Owner, cfgB.Owner = "a", "b"
		a, stopA := start(t, tb.store, Targets{"": newRecorder()}, cfgA)
		waitFor(t, 10*time.Second, "a holds every lane", func() bool { return len(a.Stats().HeldLanes) == tb.opts.Lanes })
		recB := newRecorder()
		b, _ := start(t, tb.store, Targets{"": recB}, cfgB)
		waitFor(t, 15*time.Second, "lanes shared", func() bool {
			return len(a.Stats().HeldLanes) == 2 && len(b.Stats().HeldLanes) == 2
		})
		lane := a.Stats().HeldLanes[0]
		key := keyInLane(lane, tb.opts.Lanes, 0)
		tb.insert(t, tb.row("t", key, key+"/0"))
		b.Notify(outbox.Commit{Lanes: []int{lane}}) // a wake-up that reached b only
		stopA()
		waitFor(t, 5*time.Second, "the notified row sent by b once it took the lane over", func() bool { return len(recB.got()) == 1 })
	})
}

// Three forwarders share the lanes within one of lanes/K and rebalance when one leaves
// or joins.
func TestLanesSharedFairly(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb = tb.withLanes(t, 16)
		cfg := fastConfig()
		cfg.DisableUnordered = true
		var fs []*Forwarder
		var stops []func()
		for i := range 3 {
			c := cfg
			c.Owner = fmt.Sprintf("fwd-%d", i)
			f, stop := start(t, tb.store, Targets{"": newRecorder()}, c)
			fs, stops = append(fs, f), append(stops, stop)
		}
		balanced := func(fs []*Forwarder) func() bool {
			return func() bool {
				total, k := 0, len(fs)
				for _, f := range fs {
					n := len(f.Stats().HeldLanes)
					if n < 16/k || n > (16+k-1)/k {
						return false
					}
					total += n
				}
				return total == 16
			}
		}
		waitFor(t, 15*time.Second, "3 forwarders balanced", balanced(fs))
		stops[1]()
		rest := []*Forwarder{fs[0], fs[2]}
		waitFor(t, 15*time.Second, "2 forwarders balanced after one left", balanced(rest))
		c := cfg
		c.Owner = "fwd-late"
		late, _ := start(t, tb.store, Targets{"": newRecorder()}, c)
		waitFor(t, 15*time.Second, "3 forwarders balanced after one joined", balanced(append(rest, late)))
		// No lane is held twice.
		seen := map[int]bool{}
		for _, f := range append(rest, late) {
			for _, l := range f.Stats().HeldLanes {
				if seen[l] {
					t.Fatalf("lane %d held by two forwarders", l)
				}
				seen[l] = true
			}
		}
	})
}

// Claims of unordered rows in flight are renewed: with a claim TTL far below the send
// time, a second forwarder never gets the same rows.
func TestUnorderedClaimsRenewed(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		rec.setFail(func(string, *message.Message) error { time.Sleep(time.Second); return nil })
		var recs []outbox.Record
		for i := range 20 {
			recs = append(recs, tb.row("t", "", strconv.Itoa(i)))
		}
		tb.insert(t, recs...)
		cfg := fastConfig()
		cfg.ClaimTTL = 300 * time.Millisecond
		cfg.DisableOrdered = true
		for i := range 2 {
			c := cfg
			c.Owner = fmt.Sprint(i)
			_, _ = start(t, tb.store, Targets{"": rec}, c)
		}
		waitFor(t, 20*time.Second, "all sent and deleted", func() bool { return len(rec.got()) >= 20 && tb.rows(t) == 0 })
		seen := map[string]bool{}
		for _, p := range rec.got() {
			if seen[p.msg.UUID] {
				t.Fatalf("message %s sent twice: its claim was not renewed", p.msg.UUID)
			}
			seen[p.msg.UUID] = true
		}
	})
}

// Rows a closing forwarder had claimed but not sent are given back: the next owner of
// the lane sends them at once instead of after the claim TTL.
func TestShutdownReleasesClaimedRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		lane := 5
		key := keyInLane(lane, tb.opts.Lanes, 0)
		var recs []outbox.Record
		for i := range 6 {
			recs = append(recs, tb.row("t", key, fmt.Sprintf("%s/%d", key, i)))
		}
		u := tb.row("t", "", "unordered")
		tb.insert(t, append(recs, u)...)
		cfg := fastConfig()
		cfg.ClaimTTL = time.Minute // an expiry would outlast the test
		cfg.Owner = "a"
		recA := newRecorder()
		gate := make(chan struct{})
		recA.gate = gate
		a, stopA := start(t, tb.store, Targets{"": recA}, cfg)
		waitFor(t, 10*time.Second, "a sending the lane's head", func() bool { return recA.callCount() == 2 })
		var openGate sync.Once
		t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
		waitFor(t, 10*time.Second, "a holds every lane", func() bool { return len(a.Stats().HeldLanes) == tb.opts.Lanes })
		stopped := make(chan struct{})
		go func() { stopA(); close(stopped) }()
		time.Sleep(50 * time.Millisecond) // Close is waiting for the messages in flight
		openGate.Do(func() { close(gate) })
		<-stopped
		if got := recA.got(); len(got) != 2 {
			t.Fatalf("a sent %d messages after Close, want only the 2 in flight", len(got))
		}
		if n := tb.rows(t); n != 5 {
			t.Fatalf("%d rows left, want the 5 unsent ones", n)
		}
		cfg.Owner = "b"
		recB := newRecorder()
		_, _ = start(t, tb.store, Targets{"": recB}, cfg)
		waitFor(t, 10*time.Second, "b sends the rest of the lane", func() bool { return len(recB.got()) == 5 })
		for i, p := range recB.got() {
			if want := fmt.Sprintf("%s/%d", key, i+1); string(p.msg.Payload) != want {
				t.Fatalf("b sent %s, want %s", p.msg.Payload, want)
			}
		}
	})
}

// The claims of a lane's row in flight (and of the rows behind it) are renewed while a
// slow handler works: the row is completed, not sent again.
func TestLaneClaimsRenewedWhileInFlight(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		rec.setFail(func(string, *message.Message) error { time.Sleep(time.Second); return nil })
		key := keyInLane(2, tb.opts.Lanes, 0)
		tb.insert(t, tb.row("t", key, key+"/0"), tb.row("t", key, key+"/1"))
		cfg := fastConfig()
		cfg.ClaimTTL = 300 * time.Millisecond
		cfg.DisableUnordered = true
		_, _ = start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "both sent and deleted", func() bool { return len(rec.got()) >= 2 && tb.rows(t) == 0 })
		if got := rec.got(); len(got) != 2 || string(got[0].msg.Payload) != key+"/0" || string(got[1].msg.Payload) != key+"/1" {
			t.Fatalf("sent %d messages, want each row once in order", len(got))
		}
	})
}
