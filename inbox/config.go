package inbox

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Metrics receives the inbox's counters. Methods must not block. Package
// inbox/prometheus implements it.
type Metrics interface {
	// Recorded counts an attempt that recorded a message for consumer and ran its
	// handler, before the commit: a rolled-back attempt is counted too.
	Recorded(consumer string)
	// Duplicate counts a message skipped because consumer had applied it already.
	Duplicate(consumer string)
	// Pruned counts entries the cleaner deleted.
	Pruned(n int)
	// Entries reports a sample of the table's size (the cleaner's, after each round).
	Entries(stats outbox.InboxStats)
}

type nopMetrics struct{}

func (nopMetrics) Recorded(string)           {}
func (nopMetrics) Duplicate(string)          {}
func (nopMetrics) Pruned(int)                {}
func (nopMetrics) Entries(outbox.InboxStats) {}

// Config configures an Inbox. The zero value is usable.
type Config struct {
	// Consumer names the consumer a message is recorded for. Default:
	// ConsumerFromHandlerName (the router handler's name).
	Consumer func(msg *message.Message) (string, error)
	// Metrics receives the counters (default: none).
	Metrics Metrics
	// Observe, when set, is called once per message the middleware decides on, with
	// the consumer and whether the message is a duplicate (already applied: the handler
	// is skipped), before the handler runs. It runs in the handler's goroutine with
	// msg.Context() (a tracing middleware's span, for one): package otel of this
	// repository's OpenTelemetry module marks the span outbox.inbox.duplicate. It must
	// not block. Defaults to nil (nothing called).
	Observe func(msg *message.Message, consumer string, duplicate bool)
	// Now stamps processed_at (default time.Now).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Consumer == nil {
		c.Consumer = ConsumerFromHandlerName
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error; New calls it after setting the defaults.
func (c Config) Validate() error { return nil }

// ConsumerFromHandlerName returns the name of the router handler the message is being
// handled by.
func ConsumerFromHandlerName(msg *message.Message) (string, error) {
	name := message.HandlerNameFromCtx(msg.Context())
	if name == "" {
		return "", errors.New("the message context has no handler name (not called by a router); set Config.Consumer")
	}
	return name, nil
}

// ConsumerName returns a Config.Consumer that names every message's consumer name.
func ConsumerName(name string) func(*message.Message) (string, error) {
	return func(*message.Message) (string, error) { return name, nil }
}

// Defaults of CleanerConfig.
const (
	// WindowDefault is how long entries are kept: a redelivery later than this after
	// the first processing is processed again.
	WindowDefault = 7 * 24 * time.Hour
	// IntervalDefault is the pause between two cleaning rounds.
	IntervalDefault = time.Minute
	// BatchSizeDefault is how many entries one DELETE removes at most.
	BatchSizeDefault = 1000
	// BatchPauseDefault is the pause between two batches of one round, leaving the
	// table to the handlers.
	BatchPauseDefault = 10 * time.Millisecond
	// LeaseTTLDefault is how long the retention lease lasts unless renewed; a cleaner
	// renews it before every batch.
	LeaseTTLDefault = 30 * time.Second
)

// CleanerConfig configures a Cleaner. The zero value is usable.
type CleanerConfig struct {
	// Window: entries processed longer ago are deleted. Defaults to WindowDefault.
	Window time.Duration
	// Interval between rounds. Defaults to IntervalDefault.
	Interval time.Duration
	// BatchSize is the most entries one statement deletes. Defaults to BatchSizeDefault.
	BatchSize int
	// BatchPause between the batches of a round. Defaults to BatchPauseDefault;
	// negative means none.
	BatchPause time.Duration
	// LeaseTTL of the retention lease. Defaults to LeaseTTLDefault.
	LeaseTTL time.Duration
	// Owner names this instance in the lease row. Defaults to "<hostname>/<pid>".
	Owner string
	// Metrics receives what was pruned and the table's size after each round.
	Metrics Metrics
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *CleanerConfig) setDefaults() {
	if c.Window == 0 {
		c.Window = WindowDefault
	}
	if c.Interval == 0 {
		c.Interval = IntervalDefault
	}
	if c.BatchSize == 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.BatchPause == 0 {
		c.BatchPause = BatchPauseDefault
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = LeaseTTLDefault
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error naming the field (wrapping
// outbox.ErrInvalidOptions).
func (c CleanerConfig) Validate() error {
	switch {
	case c.Window <= 0:
		return outbox.InvalidOption("Window", "must be positive, got %s", c.Window)
	case c.Interval <= 0:
		return outbox.InvalidOption("Interval", "must be positive, got %s", c.Interval)
	case c.BatchSize <= 0:
		return outbox.InvalidOption("BatchSize", "must be positive, got %d", c.BatchSize)
	case c.LeaseTTL < time.Second:
		return outbox.InvalidOption("LeaseTTL", "must be at least 1s, got %s", c.LeaseTTL)
	}
	return nil
}
