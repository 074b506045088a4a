package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
)

// hangTopic is the topic whose messages the stalling target never returns from (until
// the run ends): a broker client without a timeout.
const hangTopic = "hang"

// stallPublisher counts the messages of every topic but hangTopic, whose calls hang
// until release is closed.
type stallPublisher struct {
	n, hung atomic.Int64
	release chan struct{}
	once    sync.Once
}

func (p *stallPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == hangTopic {
		p.hung.Add(int64(len(msgs)))
		<-p.release
		return nil
	}
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *stallPublisher) Close() error { p.unhang(); return nil }
func (p *stallPublisher) Count() int64 { return p.n.Load() }
func (p *stallPublisher) unhang()      { p.once.Do(func() { close(p.release) }) }

// stallSection: a forwarder (Run, default Config) with S messages hung at the target
// drains n unordered rows committed at once, against the same forwarder without hung
// messages: the rate with them over the rate without (issue 36's goal: at least 0.8 for
// S up to half of InFlight).
func stallSection(ctx context.Context, e *engine, cfg config, sec *section) error {
	n := cfg.stallRows
	for run := 0; run < cfg.runs; run++ {
		base, err := stallDrain(ctx, e, n, 0)
		if err != nil {
			return err
		}
		sec.add("s0_msgs_per_s", "no hung message", "msgs/s", base)
		for _, s := range []int{8, forwarder.InFlightDefault / 2} {
			rate, err := stallDrain(ctx, e, n, s)
			if err != nil {
				return err
			}
			key := fmt.Sprintf("s%d", s)
			sec.add(key+"_msgs_per_s", fmt.Sprintf("%d messages hung at the target", s), "msgs/s", rate)
			sec.add(key+"/ratio_hung_free", fmt.Sprintf("rate with %d hung / without", s), "ratio", rate/base)
		}
	}
	sec.note("Run with the default Config into a target that returns at once, except for the messages of one topic, "+
		"whose calls never return until the run ends. The hung messages are committed first and are in flight "+
		"(handed over to claims) before the %d other unordered rows are committed in one go; the rate is theirs.", n)
	return nil
}

// stallDrain runs a forwarder with hung messages in flight and returns the rate at
// which it sends n rows committed while they hang.
func stallDrain(ctx context.Context, e *engine, n, hung int) (float64, error) {
	t, err := e.newOutboxTable(ctx)
	if err != nil {
		return 0, err
	}
	defer t.drop()
	pub := &stallPublisher{release: make(chan struct{})}
	defer pub.unhang()
	f, err := forwarder.New(t.store, forwarder.Targets{"": pub}, forwarder.Config{StatsInterval: -1, ShutdownTimeout: 2 * time.Second}, nil)
	if err != nil {
		return 0, err
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(fctx) }()
	defer func() { cancel(); pub.unhang(); <-done }()
	if hung > 0 {
		if err := fillOutbox(ctx, t, hung, 0, hangTopic); err != nil {
			return 0, err
		}
		if err := waitDone(ctx, time.Now().Add(time.Minute), time.Millisecond, func() (bool, error) {
			return pub.hung.Load() >= int64(hung), nil
		}); err != nil {
			return 0, fmt.Errorf("%d messages to hang: %w", hung, err)
		}
	}
	start := time.Now()
	if err := fillOutbox(ctx, t, n, 0, destination); err != nil {
		return 0, err
	}
	f.Notify(outbox.Commit{Unordered: n}) // as the publisher's commit would (Config.Notifier)
	if err := waitDone(ctx, start.Add(5*time.Minute), time.Millisecond, func() (bool, error) {
		return pub.Count() >= int64(n), nil
	}); err != nil {
		return 0, fmt.Errorf("drain past %d hung messages: %d of %d sent: %w", hung, pub.Count(), n, err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
