package forwarder

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// keyTarget hangs every call carrying a message of the key "slow" until release is
// closed, and records the bodies it got per key, in order.
type keyTarget struct {
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	got     map[string][]string
}

func (k *keyTarget) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if strings.HasPrefix(string(m.Payload), "slow/") {
			<-k.release
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range msgs {
		key, _, _ := strings.Cut(string(m.Payload), "/")
		k.got[key] = append(k.got[key], string(m.Payload))
	}
	return nil
}

func (k *keyTarget) Close() error { return nil }

func (k *keyTarget) count(prefix string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for key, bodies := range k.got {
		if strings.HasPrefix(key, prefix) {
			n += len(bodies)
		}
	}
	return n
}

// One hung key does not stop the other keys of its lane: with every key in one lane, a
// target call that hangs on the key "slow" leaves the other keys flowing through later
// runs (commits made after the hang), and once it returns the slow key's rows follow
// in order. Router and Run, MariaDB and PostgreSQL. (A run used to wait for all its
// keys: the lane's other keys stopped after the run that held the hung one.)
func TestHungKeyDoesNotStopItsLane(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			t.Run("short backlog", func(t *testing.T) { testHungKey(t, tb.withLanes(t, 1), direct, 0) })
			// More rows of the hung key than LaneBatch: they must not fill every run.
			t.Run("backlog past LaneBatch", func(t *testing.T) { testHungKey(t, tb.withLanes(t, 1), direct, 60) })
		})
	})
}

func testHungKey(t *testing.T, tb *table, direct bool, queued int) {
	target := &keyTarget{release: make(chan struct{}), got: map[string][]string{}}
	unhang := func() { target.once.Do(func() { close(target.release) }) }
	t.Cleanup(unhang)
	cfg := fastConfig()
	cfg.ShutdownTimeout = 2 * time.Second
	if queued > 0 {
		cfg.LaneBatch, cfg.KeysInFlight = 50, 4
	}
	f, err := New(tb.store, Targets{"": target}, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if direct {
		go func() { done <- f.Run(ctx) }()
	} else {
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.AddToRouter(r); err != nil {
			t.Fatal(err)
		}
		go func() { done <- r.Run(ctx) }()
	}
	t.Cleanup(func() {
		unhang()
		cancel()
		if !direct {
			_ = f.Close()
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("forwarder did not stop")
		}
	})
	const fastKeys, rounds = 5, 4
	slow := []outbox.Record{tb.row("t", "slow", "slow/0"), tb.row("t", "slow", "slow/1")}
	for i := range queued {
		slow = append(slow, tb.row("t", "slow", fmt.Sprintf("slow/%d", i+2)))
	}
	tb.insert(t, slow...)
	for round := range rounds { // each round a commit of its own, read by a later run
		var recs []outbox.Record
		for k := range fastKeys {
			key := fmt.Sprintf("fast%d", k)
			recs = append(recs, tb.row("t", key, fmt.Sprintf("%s/%d", key, round)))
		}
		recs = append(recs, tb.row("t", "slow", fmt.Sprintf("slow/%d", round+2+queued)))
		tb.insert(t, recs...)
		waitFor(t, 20*time.Second, fmt.Sprintf("round %d of the fast keys past the hung one", round),
			func() bool { return target.count("fast") == fastKeys*(round+1) })
	}
	if n := target.count("slow"); n != 0 {
		t.Fatalf("%d rows of the hung key delivered while it hangs", n)
	}
	unhang()
	waitFor(t, 20*time.Second, "the slow key's rows after the hang", func() bool { return target.count("slow") >= rounds+2+queued })
	waitFor(t, 20*time.Second, "the table drained", func() bool { return tb.rows(t) == 0 })
	target.mu.Lock()
	defer target.mu.Unlock()
	for key, bodies := range target.got {
		for i, b := range bodies {
			if want := fmt.Sprintf("%s/%d", key, i); b != want {
				t.Fatalf("key %s: delivery %d is %q, want %q (order: %v)", key, i, b, want, bodies)
			}
		}
	}
}
