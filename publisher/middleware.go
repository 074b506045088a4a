package publisher

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Middleware returns a router middleware that runs each handler call in an outbox
// transaction (Begin: on the store's database) and so swaps the router's direct publish
// for the outbox. Prefer Handler (the same transaction around the handler function
// itself, innermost, safe beside any middleware); Middleware is for those who want one
// line for a whole router, and it is safe only under the nesting rule below.
//
//  1. it begins a transaction under the incoming message's context and puts it into
//     that context for the handler (TxFromContext, SQLTxFromContext,
//     PublisherFromContext); the message's original context is restored afterwards;
//  2. it runs the handler, which writes through the *sql.Tx and may publish through the
//     context's publisher to any topic;
//  3. it publishes the messages the handler returned into the outbox under the
//     handler's publish topic (message.PublishTopicFromCtx), commits, and returns no
//     messages, so the router publishes nothing itself. The forwarder sends them later.
//
// A handler error or panic rolls the transaction back (nothing the handler wrote or
// published survives) and is returned, so the router Nacks the message; a panic becomes
// a *PanicError. A handler registered with AddConsumerHandler has no
// publish topic: it publishes through PublisherFromContext, and returning messages from
// it is an error.
//
// A message a forwarder emitted (its context carries outbox.ContextWithForwarded) passes
// straight to the handler, with no transaction: the middleware may be installed
// router-wide (router.AddMiddleware) on the router that also runs the forwarder
// (forwarder.AddToRouter), and forwarding opens no outbox transaction and holds no
// pooled connection while the broker publishes.
//
// The nesting rule: every middleware inside this one runs in its transaction, and
// whatever it turns into success is committed. Watermill runs router-level middleware
// (router.AddMiddleware) outside handler-level middleware (handler.AddMiddleware), and
// among each the first added outermost. So, with Middleware router-wide:
//   - a Retry, PoisonQueue, or any middleware that re-runs the handler or swallows its
//     error, added at handler level or after Middleware, runs INSIDE the transaction:
//     Retry keeps a failed attempt's writes and messages beside the successful one's,
//     PoisonQueue (and cqrs's AckCommandHandlingErrors, which acks inside the handler)
//     commits a failed call. Add them at router level BEFORE Middleware, or use Handler;
//   - middleware that edits the handler's produced messages (middleware.CorrelationID
//     copies the incoming correlation ID onto them) must be inside it: this middleware
//     writes the produced messages into the outbox and returns none, so a middleware
//     outside it sees no produced messages. Messages published through
//     PublisherFromContext or ContextPublisher are never produced messages: no
//     middleware sees them, set their metadata where they are built.
//
// A message whose context already carries a transaction of this Outbox (Middleware
// twice, or Middleware around Handler) is refused with an error naming the handler.
//
// Do not Ack the message inside the handler: Watermill subscribers may cancel the
// message context on Ack, and that context governs the transaction.
func (o *Outbox) Middleware() message.HandlerMiddleware { return o.MiddlewareDB(o.store.DB()) }

// MiddlewareDB is Middleware with its transactions on another pool than the store's
// (see BeginDB).
func (o *Outbox) MiddlewareDB(db *sql.DB) message.HandlerMiddleware {
	return o.middleware(db, nil)
}

// BeginFunc begins the transaction of one handler call on db with opts (Config.TxOptions)
// in place of db.BeginTx, and may do the transaction's first work. run false means the
// handler must not run: the middleware commits the transaction (what begin wrote in it
// stands) and, when the commit succeeds, returns no error, so that the router acks the
// message. An error is returned by the middleware (the router nacks); begin must leave
// no transaction open then, nor when it panics. When its error is a stale pooled
// connection (the store's outbox.StaleConnChecker), begin is called once more, as
// BeginDB retries db.BeginTx.
type BeginFunc func(msg *message.Message, db *sql.DB, opts *sql.TxOptions) (tx *sql.Tx, run bool, err error)

// MiddlewareBegin is Middleware with each transaction begun by begin: package inbox's
// Inbox.OutboxMiddleware is built on it, so that the transaction begins with the
// message's inbox record and a message already applied skips the handler.
func (o *Outbox) MiddlewareBegin(begin BeginFunc) message.HandlerMiddleware {
	return o.middleware(o.store.DB(), begin)
}

// middleware is MiddlewareDB(db) with its transactions begun by begin (nil: BeginDB).
func (o *Outbox) middleware(db *sql.DB, begin BeginFunc) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (_ []*message.Message, err error) {
			ctx := msg.Context()
			if _, forwarded := outbox.ForwardedFromContext(ctx); forwarded {
				return h(msg)
			}
			if err := o.inTxOf(ctx); err != nil {
				return nil, err
			}
			tx, run, err := o.beginFor(msg, db, begin)
			if err != nil {
				return nil, fmt.Errorf("publisher: middleware: %w", err)
			}
			if !run {
				if err := tx.Commit(ctx); err != nil {
					return nil, fmt.Errorf("publisher: middleware: %w", err)
				}
				return nil, nil
			}
			msg.SetContext(ContextWithTx(ctx, tx))
			defer msg.SetContext(ctx)

			completed := false
			defer recoverInto(tx, &completed, &err)
			produced, herr := h(msg)
			completed = true

			if herr != nil {
				return nil, rollbackWith(tx, herr)
			}
			if len(produced) > 0 {
				topic := message.PublishTopicFromCtx(ctx)
				if topic == "" {
					return nil, rollbackWith(tx, fmt.Errorf("publisher: middleware: handler %q returned %d messages but has no publish topic; publish them through PublisherFromContext",
						message.HandlerNameFromCtx(ctx), len(produced)))
				}
				if err := tx.Publish(topic, produced...); err != nil {
					return nil, rollbackWith(tx, err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				return nil, err
			}
			return nil, nil
		}
	}
}

// beginFor begins msg's transaction on db: through begin when there is one (retried
// once on a stale pooled connection, as BeginDB is), else BeginDB. run false: the
// handler must not run.
func (o *Outbox) beginFor(msg *message.Message, db *sql.DB, begin BeginFunc) (tx *Tx, run bool, err error) {
	ctx := msg.Context()
	if begin == nil {
		tx, err := o.BeginDB(ctx, db)
		return tx, true, err
	}
	if db == nil {
		return nil, false, errors.New("publisher: Begin: db is nil")
	}
	sqlTx, run, err := begin(msg, db, o.config.TxOptions)
	if err != nil && o.staleConn(err) && ctx.Err() == nil {
		sqlTx, run, err = begin(msg, db, o.config.TxOptions)
	}
	if err != nil {
		return nil, false, err
	}
	o.begun.Add(1)
	return o.newTx(ctx, sqlTx, false), run, nil
}

func rollbackWith(tx *Tx, err error) error {
	if rbErr := tx.Rollback(); rbErr != nil {
		return errors.Join(err, rbErr)
	}
	return err
}

// PanicError is what the Middleware returns when the handler panicked (after rolling the
// transaction back). Like Watermill's middleware.RecoveredPanicError it keeps the stack.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack string // the goroutine's stack at the recovery
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("publisher: handler panicked (transaction rolled back): %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
