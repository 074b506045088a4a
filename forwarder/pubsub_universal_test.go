package forwarder_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestPubSubUniversal runs Watermill's universal Pub/Sub suite over "outbox publisher +
// forwarder into a gochannel Pub/Sub" as one Pub/Sub: every Publish is one outbox
// transaction committed on MariaDB, a forwarder republishes the rows into a persistent
// gochannel, and subscribers read from it.
//
// Features, honestly:
//   - Persistent: a message published while nobody subscribes waits in the outbox table,
//     and once forwarded in the persistent gochannel; a later subscriber gets it.
//   - NewSubscriberReceivesOldMessages: the persistent gochannel replays everything.
//   - ExactlyOnceDelivery false: the forwarder is at-least-once.
//   - GuaranteedOrder false: messages without an ordering key are forwarded concurrently,
//     and the persistent gochannel replays stored messages to a new subscriber
//     concurrently too (per-key order through the outbox is shown end to end on Kafka by
//     TestE2E_RabbitMQAndKafka and the lane tests).
//   - ConsumerGroups false, ContextPreserved false (the context does not travel through
//     the database).
//
// Short mode (the default here; OUTBOX_TEST_FULL=1 runs the suite's full sizes).
func TestPubSubUniversal(t *testing.T) {
	e := chaos.MariaDB
	db, _ := e.Open(t)
	store := e.Table(t, db, 16)
	channel := gochannel.NewGoChannel(gochannel.Config{Persistent: true, OutputChannelBuffer: 1024}, watermill.NopLogger{})
	t.Cleanup(func() { _ = channel.Close() })
	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"": channel}, forwarder.Config{
		HandlerName: "pubsub_suite", PollInterval: 20 * time.Millisecond, MaxPollInterval: 200 * time.Millisecond,
	})
	chaos.RunForwarder(t, fwd)
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	construct := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return &outboxPublisher{ob: ob, db: db}, &channelSubscriber{ch: channel}
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                   false,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  false,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: true,
		RequireSingleInstance:            false,
		ContextPreserved:                 false,
		ForceShort:                       !chaos.FullRun(),
	}, construct, nil)
}

// outboxPublisher is the publishing half: each Publish is one committed outbox
// transaction.
type outboxPublisher struct {
	ob *publisher.Outbox
	db *sql.DB
}

func (p *outboxPublisher) Publish(topic string, msgs ...*message.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
		return tx.Publish(topic, msgs...)
	})
}

func (p *outboxPublisher) Close() error { return nil }

// channelSubscriber is the subscribing half: subscriptions on the shared gochannel that
// the forwarder feeds. Close ends only this instance's subscriptions, and closes their
// channels before it returns (the suite checks that).
type channelSubscriber struct {
	ch *gochannel.GoChannel

	mu      sync.Mutex
	cancels []context.CancelFunc
	wg      sync.WaitGroup
	closed  bool
}

func (s *channelSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("subscriber closed")
	}
	ctx, cancel := context.WithCancel(ctx)
	in, err := s.ch.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		return nil, err
	}
	s.cancels = append(s.cancels, cancel)
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		for {
			select {
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (s *channelSubscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, c := range s.cancels {
		c()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
