package forwarder_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
)

// sliceSubscriber hands out prepared messages on one channel from `window` goroutines,
// each waiting for its message's ack before taking the next, as a forwarder's subscription
// does: the router's share of forwarding, without a database.
type sliceSubscriber struct {
	msgs   []*message.Message
	window int
}

func (s *sliceSubscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	for range s.window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(s.msgs) {
					return
				}
				m := s.msgs[i]
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
				select {
				case <-m.Acked():
				case <-m.Nacked():
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out, nil
}

func (s *sliceSubscriber) Close() error { return nil }

func benchMessages(n int) []*message.Message {
	body := make([]byte, 200)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), body)
		msgs[i].Metadata = message.Metadata{"trace_id": "0123456789abcdef", "type": "order.created", "v": "1"}
	}
	return msgs
}

// BenchmarkRouterPassThroughBaseline: what Watermill's router alone costs per message
// when it passes messages from a subscription to a no-op publisher (a consumer handler
// that publishes), with the forwarder's default in-flight window: the floor under the
// CPU per message of any forwarder that runs as a router handler. "direct" is the same
// subscription acked without a router. Reports Go CPU and allocations per message.
func BenchmarkRouterPassThroughBaseline(b *testing.B) {
	window := forwarder.InFlightDefault
	run := func(b *testing.B, viaRouter bool) {
		msgs := benchMessages(b.N)
		sub := &sliceSubscriber{msgs: msgs, window: window}
		nop := &chaos.NopPublisher{}
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		cpu0 := processCPU()
		b.ResetTimer()
		if viaRouter {
			r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
			if err != nil {
				b.Fatal(err)
			}
			r.AddConsumerHandler("pass", "t", sub, func(m *message.Message) error { return nop.Publish("t", m) })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			for nop.Count() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		} else {
			ch, _ := sub.Subscribe(context.Background(), "t")
			for m := range ch {
				if err := nop.Publish("t", m); err != nil {
					b.Fatal(err)
				}
				m.Ack()
			}
			b.StopTimer()
		}
		cpu := processCPU() - cpu0
		runtime.ReadMemStats(&ms1)
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu_ns/msg")
		b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/msg")
	}
	b.Run("router", func(b *testing.B) { run(b, true) })
	b.Run("direct", func(b *testing.B) { run(b, false) })
}
