package chaos

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// RecordingPublisher is a target publisher that hands every message to a Recorder (and
// counts Publish calls). It stands in for a broker where a test checks the forwarder's
// own guarantees (order, loss, duplicates) and a broker would only add noise; tests of
// broker integration use Kafka (kfake) or RabbitMQ instead.
type RecordingPublisher struct {
	Recorder *Recorder
	// Delay, when set, is slept in each Publish (a slow broker).
	Delay time.Duration

	calls  atomic.Int64
	closed atomic.Bool
}

// Publish records msgs in order.
func (p *RecordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.calls.Add(1)
	if p.closed.Load() {
		return errors.New("chaos: recording publisher closed")
	}
	if p.Delay > 0 {
		time.Sleep(p.Delay)
	}
	for _, m := range msgs {
		p.Recorder.RecordMessage(m)
	}
	return nil
}

// Calls returns how many times Publish was called.
func (p *RecordingPublisher) Calls() int64 { return p.calls.Load() }

// Close makes further Publish calls fail.
func (p *RecordingPublisher) Close() error { p.closed.Store(true); return nil }

// NopPublisher accepts and drops everything (benchmarks: the forwarder's own cost).
type NopPublisher struct{ n atomic.Int64 }

// Publish counts msgs.
func (p *NopPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.n.Add(int64(len(msgs)))
	return nil
}

// Count returns the number of messages published.
func (p *NopPublisher) Count() int64 { return p.n.Load() }

// Close does nothing.
func (p *NopPublisher) Close() error { return nil }

// ErrInjected is what a failing Flaky publisher returns.
var ErrInjected = errors.New("chaos: injected publish failure")

// Flaky wraps a publisher and fails on demand, counting every attempt, so a test can show
// that the forwarder backs off (bounded attempts while failing) and drains afterwards.
type Flaky struct {
	Next message.Publisher

	mu       sync.Mutex
	failing  bool
	poison   map[string]bool // UUIDs that always fail
	attempts int64           // Publish calls while failing
	total    int64           // every Publish call
	perUUID  map[string]int  // attempts per message UUID
}

// NewFlaky wraps next.
func NewFlaky(next message.Publisher) *Flaky {
	return &Flaky{Next: next, poison: map[string]bool{}, perUUID: map[string]int{}}
}

// SetFailing switches total failure on or off.
func (f *Flaky) SetFailing(v bool) {
	f.mu.Lock()
	f.failing = v
	f.mu.Unlock()
}

// Poison makes every Publish of a message with this UUID fail.
func (f *Flaky) Poison(uuid string) {
	f.mu.Lock()
	f.poison[uuid] = true
	f.mu.Unlock()
}

// Publish fails while failing (or for poisoned UUIDs), else delegates.
func (f *Flaky) Publish(topic string, msgs ...*message.Message) error {
	f.mu.Lock()
	f.total++
	fail := f.failing
	if fail {
		f.attempts++
	}
	for _, m := range msgs {
		f.perUUID[m.UUID]++
		if f.poison[m.UUID] {
			fail = true
		}
	}
	f.mu.Unlock()
	if fail {
		return ErrInjected
	}
	return f.Next.Publish(topic, msgs...)
}

// FailedAttempts returns the number of Publish calls made while failing was on.
func (f *Flaky) FailedAttempts() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// Total returns every Publish call.
func (f *Flaky) Total() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// AttemptsOf returns how many times a message with uuid was offered.
func (f *Flaky) AttemptsOf(uuid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perUUID[uuid]
}

// Close closes Next.
func (f *Flaky) Close() error { return f.Next.Close() }
