package publisher

import (
	"context"
	"database/sql"

	"github.com/ThreeDotsLabs/watermill/message"
)

type txKey struct{}

// ContextWithTx returns a copy of ctx carrying tx. Outbox.WithTx and the Middleware do
// this for you; code further down the call gets it back with TxFromContext,
// SQLTxFromContext or PublisherFromContext.
func ContextWithTx(ctx context.Context, tx *Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the outbox transaction ctx carries.
func TxFromContext(ctx context.Context) (*Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*Tx)
	return tx, ok && tx != nil
}

// SQLTxFromContext returns the *sql.Tx of the outbox transaction ctx carries, for the
// handler's own statements.
func SQLTxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := TxFromContext(ctx)
	if !ok {
		return nil, false
	}
	return tx.SQLTx(), true
}

// PublisherFromContext returns the outbox transaction ctx carries as a
// message.Publisher: messages published through it are committed with the transaction.
// In a handler wrapped by the Middleware it is the way to publish to topics other than
// the handler's publish topic (and the only way for AddConsumerHandler handlers).
func PublisherFromContext(ctx context.Context) (message.Publisher, bool) {
	tx, ok := TxFromContext(ctx)
	if !ok {
		return nil, false
	}
	return tx, true
}
