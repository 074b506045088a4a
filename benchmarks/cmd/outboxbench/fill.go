package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmforwarder "github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// Every contender carries the same message: a ~200-byte JSON payload (watermill-sql's
// default payload column is JSON) and three metadata entries.
var (
	payload = []byte(`{"order_id":"0123456789","customer":"c-42","amount":1999,"currency":"EUR","pad":"` + strings.Repeat("x", 110) + `"}`)
)

func newMetadata() message.Metadata {
	return message.Metadata{"trace_id": "0123456789abcdef", "type": "order.created", "v": "1"}
}

func newMessage() *message.Message {
	m := message.NewMessage(watermill.NewUUID(), payload)
	m.Metadata = newMetadata()
	return m
}

func newMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = newMessage()
	}
	return msgs
}

const destination = "orders"

// fillOutbox inserts n rows through the store in transactions of 5,000; keys > 0 gives
// each row the ordering key "k<i mod keys>" (and its lane).
func fillOutbox(ctx context.Context, t *outboxTable, n, keys int, dest string) error {
	headers := headercodec.EncodeMetadata(nil, newMetadata())
	now := time.Now().UTC()
	const chunk = 5000
	recs := make([]outbox.Record, 0, chunk)
	for done := 0; done < n; {
		recs = recs[:0]
		for i := done; i < n && len(recs) < chunk; i++ {
			r := outbox.Record{
				ID: outbox.NewID(), MessageUUID: watermill.NewUUID(), Lane: outbox.Unordered,
				Destination: dest, Headers: headers, Body: payload, CreatedAt: now,
			}
			if keys > 0 {
				r.OrderingKey = "k" + strconv.Itoa(i%keys)
				r.Lane = lanes.Of(r.OrderingKey, t.opts.Lanes)
			}
			recs = append(recs, r)
		}
		err := retry(ctx, t.e, func() error {
			tx, err := t.e.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := t.store.Insert(ctx, tx, recs); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		})
		if err != nil {
			return fmt.Errorf("fill outbox: %w", err)
		}
		done += len(recs)
	}
	// Fresh statistics, as autovacuum would have them in production: without them
	// PostgreSQL plans the raw loop's claim as a sort of the whole backlog.
	analyze := "ANALYZE " + t.name()
	if t.e.name == "mysql" {
		analyze = "ANALYZE TABLE " + t.name()
	}
	if _, err := t.e.db.ExecContext(ctx, analyze); err != nil {
		return fmt.Errorf("fill outbox: analyze: %w", err)
	}
	return nil
}

// fillWM queues n messages for Watermill's forwarder the way its outbox writes them:
// watermill-sql's publisher inside transactions, wrapped in the forwarder's envelope
// publisher; 1,000 messages per Publish (one multi-row INSERT), 5,000 per transaction.
func fillWM(ctx context.Context, w *wmTables, n int) error {
	for done := 0; done < n; {
		size := min(5000, n-done)
		err := retry(ctx, w.e, func() error {
			tx, err := w.e.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			p, err := w.publisherOn(tx)
			if err != nil {
				_ = tx.Rollback()
				return err
			}
			fp := wmforwarder.NewPublisher(p, wmforwarder.PublisherConfig{ForwarderTopic: w.topic})
			for i := 0; i < size; i += 1000 {
				if err := fp.Publish(destination, newMessages(min(1000, size-i))...); err != nil {
					_ = tx.Rollback()
					return err
				}
			}
			return tx.Commit()
		})
		if err != nil {
			return fmt.Errorf("fill watermill-sql: %w", err)
		}
		done += size
	}
	return nil
}

// retry runs fn again after a deadlock or serialization failure.
func retry(ctx context.Context, e *engine, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt >= 20 || !e.retryable(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
	}
}

// nopPublisher counts messages and sends nothing.
type nopPublisher struct{ n atomic.Int64 }

func (p *nopPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *nopPublisher) Close() error { return nil }
func (p *nopPublisher) Count() int64 { return p.n.Load() }

// countingPublisher counts messages its target accepted.
type countingPublisher struct {
	next message.Publisher
	n    atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.next.Publish(topic, msgs...); err != nil {
		return err
	}
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *countingPublisher) Close() error { return nil }
func (p *countingPublisher) Count() int64 { return p.n.Load() }

// errDeadline marks a drain stopped at its time limit (its rate is then delivered/time).
var errDeadline = fmt.Errorf("time limit reached")

// waitDone polls cond every interval until it is true, ctx ends or deadline passes.
func waitDone(ctx context.Context, deadline time.Time, interval time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errDeadline
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
