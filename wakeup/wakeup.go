// Package wakeup carries commit wake-ups from the processes that write an outbox table to
// the forwarders that drain it, over any Watermill Pub/Sub the application already runs
// (NATS, Redis Streams, RabbitMQ, Kafka, ...), whatever the database dialect.
//
// The writer links a Notifier to its publisher (publisher.Config.Notifiers): after each
// commit it merges the committed lanes into the next wake-up, and publishes at most one
// small message per Interval (the first commit after a quiet Interval at once; during a
// burst the spacing grows up to MaxInterval). The
// forwarder sets a Source as its Config.Wake: it subscribes to the topic and wakes the
// workers of the notified lanes and the unordered claimers at once.
//
//	n, _ := wakeup.NewNotifier(amqpPublisher, "outbox_wakeup", store.Options(), wakeup.Config{}, logger)
//	defer n.Close()
//	ob, _ := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, logger)
//
//	src, _ := wakeup.NewSource(amqpSubscriber, "outbox_wakeup", store.Options(), logger)
//	fwd, _ := forwarder.New(store, targets, forwarder.Config{Wake: src}, logger)
//
// Every forwarder must receive every wake-up: subscribe with a fan-out configuration
// (RabbitMQ: a pub/sub config with a queue per forwarder process, such as
// amqp.NewNonDurablePubSubConfig with a unique GenerateQueueNameTopicNameWithSuffix;
// Kafka: a consumer group per process; NATS core or Redis Streams with a consumer group
// per process). Wake-ups are hints: the payload names lanes, never rows. One that is lost
// (broker down, a message dropped) only delays its rows until the forwarder's next
// poll, and one for a table the Source does not serve is ignored (the message carries
// the table in MetadataTable), so several tables may share a topic.
package wakeup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/wake"
)

// MetadataTable holds the outbox table a wake-up is for ("<schema>.<prefix>outbox", or
// "<prefix>outbox" without a schema).
const MetadataTable = "outbox_table"

// Defaults of Config.
const (
	IntervalDefault    = 5 * time.Millisecond
	MaxIntervalDefault = 50 * time.Millisecond
	TimeoutDefault     = 5 * time.Second
)

// Config configures a Notifier. Zero fields take their defaults.
type Config struct {
	// Interval is the shortest time between two wake-ups: the first commit after a quiet
	// Interval is published at once, the later ones are merged into one wake-up per
	// Interval. Defaults to IntervalDefault.
	Interval time.Duration
	// MaxInterval bounds the spacing during a burst: while each Interval gathers several
	// commits (4 or more) the spacing doubles up to MaxInterval (the forwarders are busy
	// then, and each wake-up costs a message), and it drops back to Interval as soon as
	// commits come one at a time. Defaults to MaxIntervalDefault; equal to Interval, the
	// spacing is fixed.
	MaxInterval time.Duration
	// Timeout is the deadline of the context of a wake-up message (publishers that honour
	// it give up then), and how long Close waits for a Publish in progress. Defaults to
	// TimeoutDefault.
	Timeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Interval == 0 {
		c.Interval = IntervalDefault
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = max(MaxIntervalDefault, c.Interval)
	}
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
}

// Validate checks c after defaults; errors wrap outbox.ErrInvalidOptions.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, outbox.InvalidOption("wakeup.Config.Interval", "must not be negative, got %s", c.Interval))
	}
	if c.MaxInterval < c.Interval {
		errs = append(errs, outbox.InvalidOption("wakeup.Config.MaxInterval", "must not be below Interval (%s), got %s", c.Interval, c.MaxInterval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, outbox.InvalidOption("wakeup.Config.Timeout", "must be positive, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// tableName names the table in MetadataTable.
func tableName(opts outbox.Options) string {
	if opts.Schema == "" {
		return opts.OutboxTable()
	}
	return opts.Schema + "." + opts.OutboxTable()
}

func checkArgs(topic string, opts outbox.Options) (outbox.Options, error) {
	if topic == "" {
		return opts, outbox.InvalidOption("wakeup: topic", "must not be empty")
	}
	opts = opts.WithDefaults()
	return opts, opts.Validate()
}

// Notifier publishes wake-ups after commits; it is an outbox.Notifier for
// publisher.Config.Notifiers.
type Notifier struct {
	pub     message.Publisher
	topic   string
	opts    outbox.Options
	table   string
	timeout time.Duration
	c       *wake.Coalescer
}

var _ outbox.Notifier = (*Notifier)(nil)

// NewNotifier starts a Notifier that publishes the wake-ups of the table opts names to
// topic through pub (which it does not close). A nil logger logs nothing. Close it after
// the last commit.
func NewNotifier(pub message.Publisher, topic string, opts outbox.Options, config Config, logger watermill.LoggerAdapter) (*Notifier, error) {
	if pub == nil {
		return nil, outbox.InvalidOption("wakeup: publisher", "is nil")
	}
	opts, err := checkArgs(topic, opts)
	if err != nil {
		return nil, err
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	n := &Notifier{pub: pub, topic: topic, opts: opts, table: tableName(opts), timeout: config.Timeout}
	logger = logger.With(watermill.LogFields{"outbox_table": n.table, "topic": topic})
	n.c = wake.NewCoalescer(n.send, config.Interval, config.MaxInterval, config.Timeout, logger)
	return n, nil
}

// NotifierOptions implements outbox.Notifier.
func (n *Notifier) NotifierOptions() outbox.Options { return n.opts }

// Notify implements outbox.Notifier: it merges c into the next wake-up; it never blocks.
func (n *Notifier) Notify(c outbox.Commit) { n.c.Add(c) }

// Close publishes the pending wake-up and stops; it does not close the publisher. It is
// idempotent.
func (n *Notifier) Close() error { return n.c.Close() }

func (n *Notifier) send(ctx context.Context, payload []byte) error {
	msg := message.NewMessage(watermill.NewULID(), append([]byte(nil), payload...))
	msg.Metadata.Set(MetadataTable, n.table)
	msg.SetContext(ctx)
	if err := n.pub.Publish(n.topic, msg); err != nil {
		return fmt.Errorf("wakeup: publish to %q: %w", n.topic, err)
	}
	return nil
}

// Source subscribes to wake-ups for a forwarder; it is an outbox.WakeSource for
// forwarder.Config.Wake.
type Source struct {
	sub    message.Subscriber
	topic  string
	opts   outbox.Options
	table  string
	logger watermill.LoggerAdapter
}

var _ outbox.WakeSource = (*Source)(nil)

// NewSource returns a Source of the wake-ups of the table opts names, subscribed to topic
// through sub (which it does not close) when the forwarder starts. A nil logger logs
// nothing.
func NewSource(sub message.Subscriber, topic string, opts outbox.Options, logger watermill.LoggerAdapter) (*Source, error) {
	if sub == nil {
		return nil, outbox.InvalidOption("wakeup: subscriber", "is nil")
	}
	opts, err := checkArgs(topic, opts)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	s := &Source{sub: sub, topic: topic, opts: opts, table: tableName(opts)}
	s.logger = logger.With(watermill.LogFields{"outbox_table": s.table, "topic": topic})
	return s, nil
}

// Listen implements outbox.WakeSource: it subscribes to the topic and hands every
// wake-up for its table to n until ctx ends. A failed subscription, or one that ends
// before ctx, returns an error wrapping outbox.ErrWakeUnavailable (the forwarder then
// polls). Every message is acked: a wake-up is never worth a redelivery.
func (s *Source) Listen(ctx context.Context, n outbox.Notifier) error {
	msgs, err := s.sub.Subscribe(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("%w: wakeup: subscribe to %q: %w", outbox.ErrWakeUnavailable, s.topic, err)
	}
	s.logger.Info("Listening for wake-ups", nil)
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-msgs:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%w: wakeup: the subscription to %q ended", outbox.ErrWakeUnavailable, s.topic)
			}
			if msg.Metadata.Get(MetadataTable) == s.table {
				n.Notify(wake.Decode(string(msg.Payload), s.opts.Lanes))
			}
			msg.Ack()
		}
	}
}
