package publisher

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// ContextPublisher returns a message.Publisher that lives as long as the application
// and publishes each message into the outbox transaction its context carries (the
// message's Context(), as TxFromContext reads it). Hand it to what takes one publisher
// at construction: cqrs.EventBus and cqrs.CommandBus (which set the caller's ctx on each
// message they publish), a handler's publisher slot, service structs.
//
// The transaction comes from the Middleware (handler code, cqrs handlers included: their
// ctx is the message's), from WithTx, or from AttachContext for code that owns its
// *sql.Tx. A message whose context carries no transaction fails the whole call with an
// error wrapping outbox.ErrNoTransaction that names the fix; nothing is published then,
// and never directly to a broker. Messages of one call may belong to different
// transactions; each is buffered into its own, all-or-nothing per call only when they
// share one.
//
// Close does nothing: the transactions belong to their owners.
func (o *Outbox) ContextPublisher() message.Publisher { return contextPublisher{o} }

type contextPublisher struct{ ob *Outbox }

func (p contextPublisher) Publish(topic string, msgs ...*message.Message) error {
	txs := make([]*Tx, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("publisher: ContextPublisher: message %d is nil", i)
		}
		tx, ok := TxFromContext(m.Context())
		if !ok {
			return fmt.Errorf("publisher: ContextPublisher: message %s to %q: %w; publish it from a handler under Outbox.Middleware, "+
				"inside Outbox.WithTx, or with a context from Outbox.AttachContext or ContextWithTx", m.UUID, topic, outbox.ErrNoTransaction)
		}
		if tx.ob != p.ob {
			return fmt.Errorf("publisher: ContextPublisher: message %s to %q: its context's transaction belongs to another Outbox (another table)", m.UUID, topic)
		}
		txs[i] = tx
	}
	// Consecutive messages of one transaction go in one Publish call (all or none).
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && txs[end] == txs[start] {
			end++
		}
		if err := txs[start].Publish(topic, msgs[start:end]...); err != nil {
			return err
		}
		start = end
	}
	return nil
}

func (contextPublisher) Close() error { return nil }

// AttachContext is Attach for service code that owns a *sql.Tx and a ctx: it returns
// ctx carrying the attached outbox transaction, for ContextPublisher and
// PublisherFromContext further down the call. Flush it before committing tx (then
// NotifyCommitted), as with Attach.
func (o *Outbox) AttachContext(ctx context.Context, tx *sql.Tx) (context.Context, *Tx) {
	t := o.Attach(tx)
	return ContextWithTx(ctx, t), t
}
