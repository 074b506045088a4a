package forwarder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// runForwarder runs a forwarder with Run (no router) until the test ends.
func runForwarder(t *testing.T, st outbox.Store, targets Targets, cfg Config) *Forwarder {
	t.Helper()
	f, err := New(st, targets, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15 s of its context's end")
		}
	})
	return f
}

// forEachMode runs fn as a subtest with Run (direct) and with a router.
func forEachMode(t *testing.T, fn func(t *testing.T, direct bool)) {
	for _, direct := range []bool{true, false} {
		t.Run(map[bool]string{true: "Run", false: "router"}[direct], func(t *testing.T) { fn(t, direct) })
	}
}

// startEither starts a forwarder with Run (direct) or in a router.
func startEither(t *testing.T, direct bool, st outbox.Store, targets Targets, cfg Config) *Forwarder {
	t.Helper()
	if direct {
		return runForwarder(t, st, targets, cfg)
	}
	f, _ := start(t, st, targets, cfg)
	return f
}

// checkKeyOrder fails on a gap or reordering of any key's "key/seq" payloads (at least
// once: a repeat is a duplicate, not a violation), and returns how many distinct rows
// of each key arrived and how many repeats.
func checkKeyOrder(t *testing.T, got []published) (next map[string]int, dups int) {
	t.Helper()
	next = map[string]int{}
	for _, p := range got {
		key, i := seqOf(t, p.msg)
		switch {
		case i < next[key]:
			dups++
		case i > next[key]:
			t.Fatalf("key %s: got #%d, want #%d", key, i, next[key])
		default:
			next[key]++
		}
	}
	return next, dups
}

// Keys of one lane do not wait for each other: while the target holds the first row
// of one key (a slow partition, a slow consumer), the other keys of the same run are
// sent, each in its order; KeysInFlight 1 sends the run in id order instead, so the
// slow row holds them all.
func TestKeysOfALaneFlowPastASlowKey(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			t.Run("KeysInFlight=default", func(t *testing.T) { testSlowKey(t, tb.withLanes(t, 1), direct, 0) })
			t.Run("KeysInFlight=1", func(t *testing.T) { testSlowKey(t, tb.withLanes(t, 1), direct, 1) })
		})
	})
}

func testSlowKey(t *testing.T, tb *table, direct bool, keysInFlight int) {
	const fastKeys, per = 10, 5
	var recs []outbox.Record
	for i := range per {
		recs = append(recs, tb.row("t", "slow", fmt.Sprintf("slow/%d", i)))
		for k := range fastKeys {
			key := fmt.Sprintf("fast-%d", k)
			recs = append(recs, tb.row("t", key, fmt.Sprintf("%s/%d", key, i)))
		}
	}
	tb.insert(t, recs...)
	rec := newRecorder()
	release, reached := make(chan struct{}), make(chan struct{})
	var openOnce, reachOnce sync.Once
	open := func() { openOnce.Do(func() { close(release) }) }
	rec.setFail(func(_ string, m *message.Message) error {
		if row, _ := RowFromContext(m.Context()); row.OrderingKey == "slow" {
			reachOnce.Do(func() { close(reached) })
			<-release
		}
		return nil
	})
	cfg := fastConfig()
	cfg.KeysInFlight = keysInFlight
	startEither(t, direct, tb.store, Targets{"": rec}, cfg)
	t.Cleanup(open) // before the forwarder's cleanup: it must not wait on the held row
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("the held key's first row never reached the target")
	}
	fast := fastKeys * per
	if keysInFlight == 1 {
		time.Sleep(200 * time.Millisecond)
		if n := len(rec.got()); n != 0 {
			t.Fatalf("KeysInFlight 1: %d rows sent while the run's first row is held, want 0", n)
		}
	} else {
		// The held row is not recorded until it is released: what arrives meanwhile is
		// the other keys.
		waitFor(t, 20*time.Second, "the other keys' rows", func() bool { return len(rec.got()) >= fast })
	}
	open()
	waitFor(t, 20*time.Second, "every row", func() bool {
		next, _ := checkKeyOrder(t, rec.got())
		return len(next) == fastKeys+1 && countDistinct(t, rec.got()) == len(recs)
	})
	checkKeyOrder(t, rec.got())
	waitFor(t, 10*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
}

// countDistinct counts the distinct payloads among got.
func countDistinct(t *testing.T, got []published) int {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range got {
		seen[string(p.msg.Payload)] = true
	}
	return len(seen)
}

// A failing row ends only its key's part of a run: the other keys in flight beside it
// are sent and deleted, the failed row's key waits behind it (nothing of it is sent
// before it succeeds), and the retry keeps every key's order.
func TestKeysOfALaneFailAlone(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			tb = tb.withLanes(t, 1)
			const keys, per = 6, 4
			recs := tb.keyedRows("k", keys, per)
			tb.insert(t, recs...)
			flaky := recs[keys+2] // k2/1: the second row of k2
			rec := newRecorder()
			var mu sync.Mutex
			othersAtFirstRetry := -1
			rec.setFail(func(_ string, m *message.Message) error {
				if m.UUID != flaky.MessageUUID {
					return nil
				}
				if row, _ := RowFromContext(m.Context()); row.Attempts == 0 {
					// Fail once the other keys, in flight beside this one, are through:
					// under a lane sent strictly in id order they never get through.
					deadline := time.Now().Add(5 * time.Second)
					for len(rec.got()) < (keys-1)*per+1 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					return errors.New("partition unavailable")
				}
				mu.Lock()
				defer mu.Unlock()
				if othersAtFirstRetry < 0 {
					othersAtFirstRetry = len(rec.got())
				}
				return nil
			})
			cfg := fastConfig()
			cfg.RetryBase, cfg.RetryMax, cfg.RetryJitter = 100*time.Millisecond, 100*time.Millisecond, -1
			startEither(t, direct, tb.store, Targets{"": rec}, cfg)
			waitFor(t, 20*time.Second, "every row", func() bool { return countDistinct(t, rec.got()) == len(recs) })
			next, _ := checkKeyOrder(t, rec.got())
			for k := range keys {
				if key := fmt.Sprintf("k%d", k); next[key] != per {
					t.Fatalf("key %s: %d rows, want %d", key, next[key], per)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// Before the first retry, every row of the other keys (and k2/0) was sent:
			// the failure held its key only.
			if want := (keys-1)*per + 1; othersAtFirstRetry < want {
				t.Fatalf("%d rows sent before the failed row's first retry, want at least %d (the other keys' rows)", othersAtFirstRetry, want)
			}
			waitFor(t, 10*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
		})
	})
}

// KeysInFlight bounds the calls (Run) or messages (router) of one lane on the wire: 40
// keys of one lane into a target that takes 20 ms per call, KeysInFlight 4: at most 4
// at once, and more than one.
func TestKeysInFlightBound(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			tb = tb.withLanes(t, 1)
			var recs []outbox.Record
			for k := range 40 {
				key := fmt.Sprintf("k%d", k)
				recs = append(recs, tb.row("t", key, key+"/0"), tb.row("t", key, key+"/1"))
			}
			tb.insert(t, recs...)
			rec := newRecorder()
			var mu sync.Mutex
			now, peak := 0, 0
			rec.setFail(func(string, *message.Message) error {
				mu.Lock()
				now++
				peak = max(peak, now)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				now--
				mu.Unlock()
				return nil
			})
			cfg := fastConfig()
			cfg.KeysInFlight = 4
			startEither(t, direct, tb.store, Targets{"": rec}, cfg)
			waitFor(t, 20*time.Second, "every row", func() bool { return countDistinct(t, rec.got()) == len(recs) })
			checkKeyOrder(t, rec.got())
			mu.Lock()
			defer mu.Unlock()
			if peak > 4 || peak < 2 {
				t.Fatalf("at most %d calls on the wire at once, want 2 to 4 (KeysInFlight 4)", peak)
			}
		})
	})
}

// A target that fails every call: the first failure stops the run from starting more
// keys, so one retry cycle of a lane tries at most KeysInFlight keys (40 keys of one
// lane, KeysInFlight 4), not every key of its run.
func TestKeysInFlightOutageAttempts(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb = tb.withLanes(t, 1)
		var recs []outbox.Record
		for k := range 40 {
			key := fmt.Sprintf("k%d", k)
			recs = append(recs, tb.row("t", key, key+"/0"))
		}
		tb.insert(t, recs...)
		rec := newRecorder()
		var mu sync.Mutex
		tried := map[string]bool{}
		rec.setFail(func(_ string, m *message.Message) error {
			mu.Lock()
			tried[m.UUID] = true
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			return errors.New("broker down")
		})
		cfg := fastConfig()
		cfg.KeysInFlight = 4
		cfg.RetryBase, cfg.RetryMax, cfg.RetryJitter = time.Hour, time.Hour, -1 // one cycle only
		runForwarder(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 10*time.Second, "a first attempt", func() bool { mu.Lock(); defer mu.Unlock(); return len(tried) > 0 })
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if len(tried) > 4 {
			t.Fatalf("%d keys tried in the lane's first cycle of an outage, want at most KeysInFlight (4)", len(tried))
		}
	})
}

// A lane run's messages take their rows' payloads rather than copies
// (laneWorker.prepare); the next read must then not reuse those buffers. A target that
// keeps every message it is given (as an asynchronous publisher may) must find each
// payload as it was sent, after many runs of one lane have reused the worker's records.
func TestLaneRunMessagesKeepTheirPayloads(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb = tb.withLanes(t, 1)
		var recs []outbox.Record
		for i := range 60 {
			key := fmt.Sprintf("k%d", i%3)
			// Lengths that shrink and grow, so that a reused buffer would fit the next row.
			recs = append(recs, tb.row("t", key, fmt.Sprintf("%s/%d/%s", key, i, strings.Repeat("x", (i*7)%13))))
		}
		tb.insert(t, recs...)
		cfg := fastConfig()
		cfg.LaneBatch = 4
		cfg.DisableUnordered = true
		rec := newRecorder()
		_, stop := start(t, tb.store, Targets{"": rec}, cfg)
		defer stop()
		waitFor(t, 20*time.Second, "60 rows sent", func() bool { return len(rec.got()) >= 60 })
		for _, p := range rec.got() {
			if want := p.msg.Metadata.Get("body"); string(p.msg.Payload) != want {
				t.Errorf("message %s: payload %q, want %q (its buffer was reused by a later read)", p.msg.UUID, p.msg.Payload, want)
			}
		}
	})
}
