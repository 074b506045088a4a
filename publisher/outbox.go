package publisher

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Outbox writes Watermill messages into one outbox table through a Store. It is safe
// for concurrent use; each transaction gets its own *Tx.
type Outbox struct {
	store     outbox.Store
	config    Config
	notifiers []outbox.Notifier // Config.Notifier, then Config.Notifiers
	lanes     int
	logger    watermill.LoggerAdapter

	begun, committed atomic.Int64 // Stats
}

// Stats counts the transactions of one Outbox since New.
type Stats struct {
	// Begun counts the transactions Begin, BeginConn, WithTx and the Middleware opened
	// (attached transactions are the application's and not counted).
	Begun int64
	// Committed counts the Commit calls that succeeded (attached transactions included).
	Committed int64
}

// Stats returns the counters of the outbox.
func (o *Outbox) Stats() Stats {
	return Stats{Begun: o.begun.Load(), Committed: o.committed.Load()}
}

// New returns an Outbox over store. A nil logger is watermill.NopLogger{}.
//
// The lane count comes from store.Options(): every writer and forwarder of one table
// must be built with the same Options (the forwarder refuses to run over lanes it
// cannot own). A notifier (Config.Notifier, Config.Notifiers) serving another table is refused here, wrapping
// outbox.ErrNotifierMismatch, rather than silently waking the wrong forwarder.
func New(store outbox.Store, config Config, logger watermill.LoggerAdapter) (*Outbox, error) {
	if store == nil {
		return nil, errors.New("publisher: store is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, fmt.Errorf("publisher: invalid config: %w", err)
	}
	opts := store.Options()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("publisher: store options: %w", err)
	}
	notifiers, err := linkNotifiers(config, opts)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Outbox{store: store, config: config, notifiers: notifiers, lanes: opts.Lanes, logger: logger}, nil
}

// linkNotifiers returns Notifier and Notifiers as one list, refusing a nil one and one
// that serves another table.
func linkNotifiers(config Config, opts outbox.Options) ([]outbox.Notifier, error) {
	var list []outbox.Notifier
	if config.Notifier != nil {
		list = append(list, config.Notifier)
	}
	for i, n := range config.Notifiers {
		if n == nil {
			return nil, fmt.Errorf("publisher: invalid config: %w", outbox.InvalidOption(fmt.Sprintf("Notifiers[%d]", i), "is nil"))
		}
		list = append(list, n)
	}
	for _, n := range list {
		if o := n.NotifierOptions(); !o.SameTable(opts) {
			return nil, fmt.Errorf("%w: notifier %T serves schema %q prefix %q with %d lanes, the store schema %q prefix %q with %d lanes",
				outbox.ErrNotifierMismatch, n, o.Schema, o.TablePrefix, o.WithDefaults().Lanes, opts.Schema, opts.TablePrefix, opts.Lanes)
		}
	}
	return list, nil
}

// Store returns the store the outbox writes through.
func (o *Outbox) Store() outbox.Store { return o.store }

// Begin starts a transaction on the store's database (Store.DB, with Config.TxOptions)
// and returns the outbox bound to it. The transaction holds one pooled connection,
// which returns to the pool when the transaction completes (Commit, Rollback, or the
// application completing SQLTx() itself). As with sql.DB.BeginTx, cancelling ctx before
// the commit rolls it back.
//
// A pooled connection that the server closed while it sat idle (a restart, an
// administrator, an idle timeout) fails the BEGIN before anything was sent; Begin then
// takes another connection once (the store says which errors mean that:
// outbox.StaleConnChecker).
func (o *Outbox) Begin(ctx context.Context) (*Tx, error) { return o.BeginDB(ctx, o.store.DB()) }

// BeginDB is Begin on another pool than the store's (a primary the store does not use
// for its own reads, say). The tables must be the store's.
func (o *Outbox) BeginDB(ctx context.Context, db *sql.DB) (*Tx, error) {
	if db == nil {
		return nil, errors.New("publisher: Begin: db is nil")
	}
	tx, err := db.BeginTx(ctx, o.config.TxOptions)
	if err != nil && o.staleConn(err) && ctx.Err() == nil {
		tx, err = db.BeginTx(ctx, o.config.TxOptions)
	}
	if err != nil {
		return nil, fmt.Errorf("publisher: begin: %w", err)
	}
	o.begun.Add(1)
	return o.newTx(ctx, tx, false), nil
}

// staleConn reports whether err is a pooled connection found closed by the server.
func (o *Outbox) staleConn(err error) bool {
	c, ok := o.store.(outbox.StaleConnChecker)
	return ok && c.IsStaleConn(err)
}

// BeginConn is Begin on a connection the caller owns (session settings, temporary
// tables, advisory locks): conn stays open after the transaction completes and the
// caller closes it.
func (o *Outbox) BeginConn(ctx context.Context, conn *sql.Conn) (*Tx, error) {
	if conn == nil {
		return nil, errors.New("publisher: BeginConn: conn is nil")
	}
	tx, err := conn.BeginTx(ctx, o.config.TxOptions)
	if err != nil {
		return nil, fmt.Errorf("publisher: begin: %w", err)
	}
	o.begun.Add(1)
	return o.newTx(ctx, tx, false), nil
}

// Attach binds the outbox to a transaction the application already owns (an ORM's:
// sqlx's Tx embeds it, GORM exposes it as Statement.ConnPool). Publish buffers; Flush
// writes the buffered rows into tx; the application then commits tx as usual and calls
// NotifyCommitted, which wakes the local forwarder and returns an error wrapping
// outbox.ErrNotFlushed for messages published after the last Flush (not committed).
// Commit and Rollback work too (they complete tx). WithAttached does the Flush for you.
func (o *Outbox) Attach(tx *sql.Tx) *Tx {
	return o.newTx(nil, tx, true)
}

// WithTx runs fn in a new outbox transaction (Begin): it commits when fn returns nil and
// rolls back when fn returns an error or panics (the panic is re-raised after the
// rollback). The ctx given to fn carries the Tx (TxFromContext, SQLTxFromContext,
// PublisherFromContext), so code deeper in the call can publish into the same
// transaction.
//
// fn must not call Commit or Rollback itself. The returned error is fn's error (joined with a rollback failure, if any) or the
// Commit error, which may wrap outbox.ErrUnknownOutcome.
func (o *Outbox) WithTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	return o.WithTxDB(ctx, o.store.DB(), fn)
}

// WithTxDB is WithTx on another pool than the store's (see BeginDB).
func (o *Outbox) WithTxDB(ctx context.Context, db *sql.DB, fn func(ctx context.Context, tx *Tx) error) (err error) {
	tx, err := o.BeginDB(ctx, db)
	if err != nil {
		return err
	}
	completed := false
	defer func() {
		if !completed {
			// fn panicked: roll back, then let the panic continue.
			_ = tx.Rollback()
		}
	}()
	fnErr := fn(ContextWithTx(ctx, tx), tx)
	completed = true
	if fnErr != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, outbox.ErrTxDone) {
			return errors.Join(fnErr, rbErr)
		}
		return fnErr
	}
	return tx.Commit(ctx)
}
