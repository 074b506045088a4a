package forwarder

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// forwarderGoroutines returns the stacks of goroutines running a method of f (the
// receiver is the first argument of the frame).
func forwarderGoroutines(f *Forwarder) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ptr := fmt.Sprintf("(%p", f)
	var out []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		for _, line := range strings.Split(s, "\n") {
			if strings.Contains(line, "forwarder.(*Forwarder).") && strings.Contains(line, ptr) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func assertNoForwarderGoroutines(t *testing.T, fs ...*Forwarder) {
	t.Helper()
	var left []string
	// Close has returned: everything should be gone already; allow the scheduler a
	// moment to retire goroutines that are past their last statement.
	for range 100 {
		left = left[:0]
		for _, f := range fs {
			left = append(left, forwarderGoroutines(f)...)
		}
		if len(left) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%d goroutines of closed forwarders still running:\n%s", len(left), strings.Join(left, "\n\n"))
}

// Verification (no finding): after Close returns, no goroutine of the forwarder is left
// -- after ordered and unordered traffic, a nack with backoff, a handover between two
// forwarders, and a shutdown that has to abandon a message its handler never settles.
func TestReviewNoGoroutinesAfterClose(t *testing.T) {
	d := dialects[0]
	tb := newTable(t, d, 8)
	var recs []outbox.Record
	for i := range 40 {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("k%d", i%6)
		}
		recs = append(recs, tb.row("t", key, fmt.Sprintf("m%d", i)))
	}
	tb.insert(t, recs...)
	var nacked atomic.Bool
	rec := newRecorder()
	rec.fail = func(_ string, m *message.Message) error {
		if string(m.Payload) == "m3" && nacked.CompareAndSwap(false, true) {
			return errors.New("review: once")
		}
		return nil
	}
	cfg := fastConfig()
	cfg.StatsInterval = 50 * time.Millisecond
	cfg.ShutdownTimeout = time.Second
	cfgA, cfgB := cfg, cfg
	cfgA.Owner, cfgB.Owner = "a", "b"
	a, _ := start(t, tb.store, Targets{"": rec}, cfgA)
	waitFor(t, 30*time.Second, "all rows sent", func() bool { return tb.rows(t) == 0 })
	b, _ := start(t, tb.store, Targets{"": rec}, cfgB)
	waitFor(t, 30*time.Second, "lanes shared", func() bool {
		return len(a.Stats().HeldLanes) == 4 && len(b.Stats().HeldLanes) == 4
	})

	// A handler that never returns: Close must abandon it at ShutdownTimeout.
	hang := make(chan struct{})
	defer close(hang)
	rec.setFail(func(string, *message.Message) error { <-hang; return nil })
	key := keyInLane(a.Stats().HeldLanes[0], tb.opts.Lanes, 99)
	tb.insert(t, tb.row("t", key, key+"/0"), tb.row("t", "", "stuck-unordered"))
	waitFor(t, 30*time.Second, "both stuck rows in flight", func() bool {
		s := a.Stats()
		var n int64
		for _, l := range s.Lanes {
			n += l.InFlight
		}
		sb := b.Stats()
		return n == 1 && s.Unordered.InFlight+sb.Unordered.InFlight == 1
	})
	if n := len(forwarderGoroutines(a)); n == 0 {
		t.Fatal("the goroutine filter finds nothing of a running forwarder")
	}
	// Close directly (the routers, waiting for the hung handler, are stopped at cleanup).
	_ = a.Close()
	_ = b.Close()
	assertNoForwarderGoroutines(t, a, b)
}
