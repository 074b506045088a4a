package forwarder

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// hangingTarget hangs every Publish call that carries a message whose body starts with
// "hang" until release is closed; it records the other messages' bodies.
type hangingTarget struct {
	release chan struct{}
	hung    atomic.Int64 // calls hanging now
	mu      sync.Mutex
	got     map[string]bool
}

func newHangingTarget(t *testing.T) *hangingTarget {
	h := &hangingTarget{release: make(chan struct{}), got: map[string]bool{}}
	t.Cleanup(h.unhang)
	return h
}

var unhangMu sync.Mutex

func (h *hangingTarget) unhang() {
	unhangMu.Lock()
	defer unhangMu.Unlock()
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *hangingTarget) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if len(m.Payload) >= 4 && string(m.Payload[:4]) == "hang" {
			h.hung.Add(1)
			<-h.release
			h.hung.Add(-1)
			return nil
		}
	}
	h.mu.Lock()
	for _, m := range msgs {
		h.got[string(m.Payload)] = true
	}
	h.mu.Unlock()
	return nil
}

func (h *hangingTarget) Close() error { return nil }

func (h *hangingTarget) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// A broker client without a timeout hangs on a few messages. Each is committed once
// the previous one hangs, so each lands in a locked batch of its own: with the default
// Config, eight of them must leave the rest of the unordered rows flowing (a batch's
// slot used to stay taken while its handed-over rows settled: 3 or 4 hung messages
// stopped all unordered forwarding). Through a router and with Run.
func TestHungMessagesDoNotStallUnorderedRows(t *testing.T) {
	for _, withRun := range []bool{false, true} {
		t.Run("run="+strconv.FormatBool(withRun), func(t *testing.T) {
			forEachDialect(t, func(t *testing.T, tb *table) {
				testHungMessages(t, tb, withRun)
			})
		})
	}
}

func testHungMessages(t *testing.T, tb *table, withRun bool) {
	const hung, others = 8, 2000
	target := newHangingTarget(t)
	cfg := Config{ShutdownTimeout: 2 * time.Second, StatsInterval: -1} // default claims and windows
	if withRun {
		f, err := New(tb.store, Targets{"": target}, cfg, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			target.unhang()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s")
			}
		})
	} else {
		_, stop := start(t, tb.store, Targets{"": target}, cfg)
		t.Cleanup(func() { target.unhang(); stop() })
	}
	for i := range hung {
		tb.insert(t, tb.row("t", "", "hang-"+strconv.Itoa(i)))
		waitFor(t, 30*time.Second, "hung message "+strconv.Itoa(i)+" on the wire", func() bool { return target.hung.Load() == int64(i+1) })
	}
	recs := make([]outbox.Record, others)
	for i := range recs {
		recs[i] = tb.row("t", "", "other-"+strconv.Itoa(i))
	}
	tb.insert(t, recs...)
	waitFor(t, 60*time.Second, "the other rows delivered past 8 hung messages", func() bool { return target.count() == others })
}

// A target whose Publish never returns (a broker client without a timeout): Close, and
// Run after its context is cancelled, return within ShutdownTimeout and a small bound,
// for ordered and unordered rows, with Run and through a router. The hung row is not
// deleted: it is sent again later.
func TestShutdownBoundedWhenPublishHangs(t *testing.T) {
	for _, withRun := range []bool{false, true} {
		for _, ordered := range []bool{false, true} {
			name := "run=" + strconv.FormatBool(withRun) + "/ordered=" + strconv.FormatBool(ordered)
			t.Run(name, func(t *testing.T) {
				forEachDialect(t, func(t *testing.T, tb *table) {
					testShutdownBounded(t, tb, withRun, ordered)
				})
			})
		}
	}
}

func testShutdownBounded(t *testing.T, tb *table, withRun, ordered bool) {
	const timeout = time.Second
	const bound = 3 * time.Second // scheduling, a loaded machine
	target := newHangingTarget(t)
	cfg := Config{ShutdownTimeout: timeout, StatsInterval: -1}
	f, err := New(tb.store, Targets{"": target}, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	if withRun {
		go func() { done <- f.Run(ctx) }()
	} else {
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.AddToRouter(r); err != nil {
			t.Fatal(err)
		}
		go func() { done <- r.Run(ctx) }()
	}
	key := ""
	if ordered {
		key = "k"
	}
	tb.insert(t, tb.row("t", key, "hang"))
	waitFor(t, 30*time.Second, "the hung Publish call", func() bool { return target.hung.Load() == 1 })
	t0 := time.Now()
	if withRun {
		cancel()
	} else {
		go func() { _ = f.Close() }() // the router closes its handlers' subscriber too
		cancel()
	}
	select {
	case <-done:
		t.Logf("returned %s after the cancel (ShutdownTimeout %s)", time.Since(t0).Round(time.Millisecond), timeout)
	case <-time.After(timeout + bound):
		t.Fatalf("not returned %s after the cancel with ShutdownTimeout %s", timeout+bound, timeout)
	}
	if n := tb.rows(t); n != 1 {
		t.Fatalf("%d rows left; want the hung row kept, to be sent again", n)
	}
}
