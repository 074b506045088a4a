package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/forwarder"
)

// slowCall is how long each Publish call of the slow target takes: a remote broker's
// round trip.
const slowCall = 2 * time.Millisecond

// slowPublisher stands for a remote broker: every Publish call takes slowCall, however
// many messages it carries.
type slowPublisher struct{ n atomic.Int64 }

func (p *slowPublisher) Publish(_ string, msgs ...*message.Message) error {
	time.Sleep(slowCall)
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *slowPublisher) Close() error { return nil }
func (p *slowPublisher) Count() int64 { return p.n.Load() }

// slowSection: ordered rows (64 lanes, 1,000 keys) forwarded with the default Config
// (Run) into a target whose every Publish call takes 2 ms, against the bound of
// one call per lane at a time: lanes ÷ 2 ms messages/s when each call carried one
// message. The forwarder passes it two ways: Run carries a key's consecutive rows of one
// topic in one call, and a lane has up to Config.KeysInFlight keys' calls on the wire.
func slowSection(ctx context.Context, e *engine, cfg config, sec *section) error {
	n := cfg.slowRows
	const lanesN = 64
	bound := float64(lanesN) / slowCall.Seconds()
	for run := 0; run < cfg.runs; run++ {
		t, err := e.newOutboxTable(ctx)
		if err != nil {
			return err
		}
		if err := fillOutbox(ctx, t, n, 1000, destination); err != nil {
			t.drop()
			return err
		}
		pub := &slowPublisher{}
		rate, err := runOurs(ctx, t, forwarder.Config{}, 1, pub, pub.Count, n, 5*time.Minute)
		t.drop()
		if err != nil {
			return err
		}
		sec.add("ordered_msgs_per_s", "ours ordered, Run, default Config", "msgs/s", rate)
		sec.add("bound_msgs_per_s", fmt.Sprintf("bound: %d lanes ÷ %s per call", lanesN, slowCall), "msgs/s", bound)
		sec.add("ratio_ordered_bound", "ours ordered / bound", "ratio", rate/bound)
	}
	sec.note("The target sleeps %s per Publish call whatever it carries (a remote broker's round trip); Run puts a key's "+
		"consecutive rows of one topic in one call and a lane sends up to KeysInFlight keys at once, so the rate may pass "+
		"the bound of one message per call and one call per lane.", slowCall)
	return nil
}
