package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Inbox deduplicates a router's handlers by message UUID in the handler's own
// transaction (see the package doc). It is safe for concurrent use.
type Inbox struct {
	store  outbox.Inbox
	config Config
	logger watermill.LoggerAdapter

	recorded, duplicates atomic.Uint64
}

// Counters are an Inbox's counts since it was built, taken when the middleware decides,
// before the transaction commits: they count attempts, not commits. A message whose
// handler fails (and is rolled back, then redelivered) is counted in Recorded at every
// attempt, and a duplicate whose commit fails is counted here and not in the table
// (outbox.InboxConsumerStats.Duplicates). The committed effect is the table's:
// outboxctl stats, Store.InboxStats.
type Counters struct {
	// Recorded counts the attempts that recorded a new message and ran its handler,
	// rolled-back attempts included (not the messages applied).
	Recorded uint64
	// Duplicates counts the attempts that found the message applied already and
	// skipped the handler.
	Duplicates uint64
}

// New returns an Inbox over store (a dialect's store: mysql, postgres, sqlserver). A
// nil logger is watermill.NopLogger{}.
func New(store outbox.Inbox, config Config, logger watermill.LoggerAdapter) (*Inbox, error) {
	if store == nil {
		return nil, errors.New("inbox: store is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, fmt.Errorf("inbox: invalid config: %w", err)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Inbox{store: store, config: config, logger: logger}, nil
}

// Counters returns the counts of this Inbox.
func (i *Inbox) Counters() Counters {
	return Counters{Recorded: i.recorded.Load(), Duplicates: i.duplicates.Load()}
}

// OutboxMiddleware returns publisher's Middleware (of ob) and this inbox's in one, to
// add in place of both, under publisher's Middleware nesting rule (Retry and
// PoisonQueue outside it, never inside; Handler has no such rule): each handler call's transaction begins with the message's
// inbox record (outbox.BeginRecordInbox), and a message the consumer has applied
// already commits its count and skips the handler. On a pool opened through the
// dialect's connector (postgres.OpenDB or WrapConnector, mysql.OpenDB or NewConnector)
// the record travels in the round trip of the BEGIN, so that it costs the handler
// transaction no round trip of its own; on any other pool it is the statement after
// the BEGIN, as with Middleware. Everything else is as ob.Middleware and Middleware
// together (see the package doc).
func (i *Inbox) OutboxMiddleware(ob *publisher.Outbox) message.HandlerMiddleware {
	return ob.MiddlewareBegin(i.begin)
}

// Handler wraps a router handler function in the outbox transaction of ob, begun with
// the message's inbox record as OutboxMiddleware does, innermost: the safe wiring
// (publisher.Outbox.Handler's, with the deduplication). Every router and handler
// middleware sits outside the transaction, so Retry re-runs whole transactions, each
// recording the message again (a rolled-back record is gone with its attempt), and
// PoisonQueue acks only an attempt that was rolled back: a poisoned message is not
// recorded, and a redelivery of it runs the handler again.
func (i *Inbox) Handler(ob *publisher.Outbox, h message.HandlerFunc) message.HandlerFunc {
	return i.OutboxMiddleware(ob)(h)
}

// NoPublishHandler is Handler for router.AddConsumerHandler.
func (i *Inbox) NoPublishHandler(ob *publisher.Outbox, h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	wrapped := i.Handler(ob, func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) })
	return func(msg *message.Message) error {
		_, err := wrapped(msg)
		return err
	}
}

// begin is OutboxMiddleware's publisher.BeginFunc. A panic of the metrics or the
// logger after the record rolls the transaction back and becomes a
// *publisher.PanicError, as it does under publisher's Middleware in the separate
// wiring: an open transaction would keep the entry locked for the redelivery.
func (i *Inbox) begin(msg *message.Message, db *sql.DB, opts *sql.TxOptions) (tx *sql.Tx, first bool, err error) {
	consumer, err := i.consumer(msg)
	if err != nil {
		return nil, false, err
	}
	tx, first, err = outbox.BeginRecordInbox(msg.Context(), i.store, db, opts, consumer, msg.UUID, i.config.Now())
	if err != nil {
		return nil, false, fmt.Errorf("inbox: record message %s for %q: %w", msg.UUID, consumer, err)
	}
	defer func() {
		if r := recover(); r != nil {
			_ = tx.Rollback()
			tx, first, err = nil, false, &publisher.PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	i.count(msg, consumer, first)
	return tx, first, nil
}

// Middleware returns the router middleware that records each message in the outbox
// transaction publisher's Middleware opened (it must run around this one) and runs the
// handler only for a message the consumer has not applied yet. A duplicate returns no
// messages and no error: the transaction commits nothing and the router acks.
// OutboxMiddleware does the same with one round trip fewer on the dialect's connector.
func (i *Inbox) Middleware() message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			first, consumer, err := i.record(msg)
			if err != nil {
				return nil, err
			}
			i.count(msg, consumer, first)
			if !first {
				return nil, nil
			}
			return h(msg)
		}
	}
}

// count counts a recorded message or a skipped duplicate.
func (i *Inbox) count(msg *message.Message, consumer string, first bool) {
	if i.config.Observe != nil {
		i.config.Observe(msg, consumer, !first)
	}
	if !first {
		i.duplicates.Add(1)
		i.config.Metrics.Duplicate(consumer)
		i.logger.Debug("inbox: duplicate skipped", watermill.LogFields{"consumer": consumer, "message_uuid": msg.UUID})
		return
	}
	i.recorded.Add(1)
	i.config.Metrics.Recorded(consumer)
}

// consumer returns msg's consumer name; an error for a message without a UUID.
func (i *Inbox) consumer(msg *message.Message) (string, error) {
	if msg.UUID == "" {
		return "", fmt.Errorf("inbox: handler %q: %w", message.HandlerNameFromCtx(msg.Context()), outbox.ErrNoMessageUUID)
	}
	consumer, err := i.config.Consumer(msg)
	if err != nil {
		return "", fmt.Errorf("inbox: consumer of message %s: %w", msg.UUID, err)
	}
	return consumer, nil
}

// record inserts msg's UUID for its consumer in the context's transaction.
func (i *Inbox) record(msg *message.Message) (first bool, consumer string, err error) {
	ctx := msg.Context()
	consumer, err = i.consumer(msg)
	if err != nil {
		return false, "", err
	}
	tx, ok := publisher.TxFromContext(ctx)
	if !ok {
		return false, consumer, fmt.Errorf("inbox: consumer %q: %w (add publisher's Middleware before the inbox's, or use OutboxMiddleware)", consumer, outbox.ErrNoTx)
	}
	first, err = i.store.RecordInbox(ctx, tx.SQLTx(), consumer, msg.UUID, i.config.Now())
	if err != nil {
		return false, consumer, fmt.Errorf("inbox: record message %s for %q: %w", msg.UUID, consumer, err)
	}
	return first, consumer, nil
}
