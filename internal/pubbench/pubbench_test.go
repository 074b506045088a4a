package pubbench

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

type countPub struct {
	n    atomic.Int64
	fail func(*message.Message) error
}

func (p *countPub) Publish(_ string, msgs ...*message.Message) error {
	p.n.Add(int64(len(msgs)))
	if p.fail != nil {
		return p.fail(msgs[0])
	}
	return nil
}
func (p *countPub) Close() error { return nil }

func TestConcurrentlyPublishesEachOnceAndReportsFailures(t *testing.T) {
	msgs := make([]*message.Message, 1000)
	for i := range msgs {
		msgs[i] = message.NewMessage(string(rune('a'+i%26)), nil)
	}
	p := &countPub{}
	if err := Concurrently(p, "t", msgs, 7); err != nil || p.n.Load() != 1000 {
		t.Fatalf("err %v, published %d of 1000", err, p.n.Load())
	}
	boom := errors.New("boom")
	p = &countPub{fail: func(m *message.Message) error {
		if m.UUID == "a" {
			return boom
		}
		return nil
	}}
	err := Concurrently(p, "t", msgs, 3)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "39 of 1000 failed") {
		t.Fatalf("err = %v, want 39 failures wrapping boom", err)
	}
	if err := Concurrently(p, "t", nil, 3); err != nil {
		t.Fatalf("no messages: %v", err)
	}
}
