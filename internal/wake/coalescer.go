package wake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// BurstCommits is the number of commits gathered by one hold from which the next hold
// doubles (a burst).
const BurstCommits = 4

// SendFunc sends one payload (Set.AppendPayload); ctx carries the send timeout.
type SendFunc func(ctx context.Context, payload []byte) error

// Coalescer merges the commits given to Add and sends them with at most one send per
// hold time: the first commit after a quiet spell is sent at once, the commits that
// arrive while a send runs or during the hold after it are merged into the next one.
// During a burst (a hold that gathered BurstCommits commits or more) the hold doubles,
// up to maxInterval; a hold that gathers fewer resets it to the interval, so that
// commits that come one at a time, even back to back, are never held longer than the
// interval. Add never blocks; a failed send is logged and dropped (the forwarder's poll finds
// its rows).
type Coalescer struct {
	send        SendFunc
	interval    time.Duration
	maxInterval time.Duration
	timeout     time.Duration
	logger      watermill.LoggerAdapter

	mu      sync.Mutex
	pending Set
	commits int // merged into pending
	closed  bool

	signal  chan struct{} // capacity 1: something is pending
	stop    chan struct{}
	done    chan struct{}
	payload []byte // the run loop's buffer
	failing bool   // the last send failed (log the next failure only after a success)
}

// NewCoalescer starts a coalescer; Close stops it. maxInterval below interval is
// interval.
func NewCoalescer(send SendFunc, interval, maxInterval, timeout time.Duration, logger watermill.LoggerAdapter) *Coalescer {
	c := &Coalescer{
		send: send, interval: interval, maxInterval: max(interval, maxInterval), timeout: timeout, logger: logger,
		signal: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.run()
	return c
}

// Add merges commit into the next send.
func (c *Coalescer) Add(commit outbox.Commit) {
	if len(commit.Lanes) == 0 && commit.Unordered == 0 {
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.pending.Add(commit)
	c.commits++
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// Close sends what is pending and stops, waiting at most the send timeout for a send
// in progress. It is idempotent.
func (c *Coalescer) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-time.After(2*c.timeout + time.Second):
		return errors.New("wake: a wake-up send did not return in time")
	}
}

func (c *Coalescer) run() {
	defer close(c.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		select {
		case <-c.signal:
		case <-c.stop:
			c.flush()
			return
		}
		// A stale signal (its commits went out with an earlier send) sends nothing.
		sent, _ := c.flush()
		for hold := c.interval; sent; {
			// Hold the next send: commits meanwhile merge into it.
			timer.Reset(hold)
			select {
			case <-timer.C:
			case <-c.stop:
				c.flush()
				return
			}
			var merged int
			sent, merged = c.flush()
			if merged >= BurstCommits {
				hold = min(2*hold, c.maxInterval)
			} else {
				hold = c.interval
			}
		}
	}
}

// flush sends the pending set; sent is false when nothing was pending, merged counts
// the commits it held.
func (c *Coalescer) flush() (sent bool, merged int) {
	c.mu.Lock()
	if c.pending.Empty() {
		c.mu.Unlock()
		return false, 0
	}
	merged, c.commits = c.commits, 0
	c.payload = c.pending.AppendPayload(c.payload[:0])
	c.pending.Reset()
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	err := c.send(ctx, c.payload)
	cancel()
	switch {
	case err != nil && !c.failing:
		c.failing = true
		c.logger.Error("Sending a wake-up failed; forwarders find the rows at their next poll (further failures are not logged until one succeeds)",
			fmt.Errorf("wake: %w", err), nil)
	case err == nil && c.failing:
		c.failing = false
		c.logger.Info("Sending wake-ups works again", nil)
	}
	return true, merged
}
