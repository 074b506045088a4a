package forwarder

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Verification (no finding): per-key order under churn. Two forwarders share 8 lanes
// while a third joins and leaves again and again (lanes handed over with rows claimed
// and in flight), and the target nacks about one message in seven on its first attempt
// (backoff holds the lane). At least once: a row may arrive again (a replay), but when
// #i of a key arrives, #0..#i-1 of that key must all have arrived before it.
func TestReviewPerKeyOrderUnderChurn(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		const keys, per = 16, 20
		recs := tb.keyedRows("key-", keys, per)
		tb.insert(t, recs...)

		var mu sync.Mutex
		var order []string // payloads in publish order, over every forwarder
		var last time.Time
		var maxGap time.Duration
		target := newRecorder()
		target.fail = func(_ string, m *message.Message) error {
			row, _ := RowFromContext(m.Context())
			h := fnv.New32a()
			h.Write([]byte(m.UUID))
			if row.Attempts == 0 && h.Sum32()%7 == 0 {
				return errors.New("review: first attempt fails")
			}
			mu.Lock()
			order = append(order, string(m.Payload))
			if now := time.Now(); !last.IsZero() && now.Sub(last) > maxGap {
				maxGap = now.Sub(last)
			}
			last = time.Now()
			mu.Unlock()
			return nil
		}
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.LaneBatch = 4
		cfgA, cfgB := cfg, cfg
		cfgA.Owner, cfgB.Owner = "a", "b"
		_, _ = start(t, tb.store, Targets{"": target}, cfgA)
		_, _ = start(t, tb.store, Targets{"": target}, cfgB)

		done := make(chan struct{})
		churned := make(chan int)
		go func() {
			n := 0
			defer func() { churned <- n }()
			for {
				select {
				case <-done:
					return
				case <-time.After(150 * time.Millisecond):
				}
				c := cfg
				c.Owner = fmt.Sprintf("c%d", n)
				c.ShutdownTimeout = 2 * time.Second
				_, stop := start(t, tb.store, Targets{"": target}, c)
				select {
				case <-done:
				case <-time.After(300 * time.Millisecond):
				}
				stop()
				n++
			}
		}()
		waitFor(t, 60*time.Second, "every row delivered and deleted", func() bool { return tb.rows(t) == 0 })
		close(done)
		n := <-churned

		mu.Lock()
		defer mu.Unlock()
		next := map[string]int{}
		dups := 0
		for _, p := range order {
			m := message.NewMessage("", []byte(p))
			key, i := seqOf(t, m)
			switch {
			case i < next[key]:
				dups++
			case i > next[key]:
				t.Fatalf("key %s: #%d arrived before #%d", key, i, next[key])
			default:
				next[key]++
			}
		}
		for k := range keys {
			if got := next[fmt.Sprintf("key-%d", k)]; got != per {
				t.Fatalf("key-%d: %d of %d delivered", k, got, per)
			}
		}
		t.Logf("%d messages, %d replays, %d joins/leaves of a third forwarder, longest pause between deliveries %s",
			len(order), dups, n, maxGap.Round(time.Millisecond))
	})
}
