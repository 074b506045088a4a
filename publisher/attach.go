package publisher

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// WithAttached runs fn with the outbox attached to tx, a transaction the application
// (an ORM) owns, and flushes what fn published into tx when fn returns nil: the one way
// to use Attach that cannot forget Flush. The application then commits tx as usual and
// may call NotifyCommitted on the returned Tx (nil when fn or Flush failed) to wake the
// local forwarder.
//
//	// sqlx
//	stx, err := dbx.BeginTxx(ctx, nil)
//	defer stx.Rollback()
//	otx, err := ob.WithAttached(ctx, stx.Tx, func(ctx context.Context, tx *publisher.Tx) error {
//		// stx.ExecContext(ctx, ...); tx.Publish(...) or a ContextPublisher with ctx
//	})
//	err = stx.Commit()
//	err = otx.NotifyCommitted()
//
//	// GORM: inside db.Transaction(func(g *gorm.DB) error { ... })
//	_, err := ob.WithAttached(ctx, g.Statement.ConnPool.(*sql.Tx), fn)
//
// fn's ctx carries the attached transaction (AttachContext), for ContextPublisher and
// PublisherFromContext further down the call. fn's error is returned as it is and
// nothing is flushed: the application rolls tx back (an ORM does when its function
// returns the error). After the flush the Tx is closed: a Publish into it later (a
// goroutine fn started, a ctx kept) fails with outbox.ErrClosed instead of waiting for a
// Flush that never comes.
func (o *Outbox) WithAttached(ctx context.Context, tx *sql.Tx, fn func(ctx context.Context, tx *Tx) error) (*Tx, error) {
	if tx == nil {
		return nil, fmt.Errorf("publisher: WithAttached: tx is nil")
	}
	txCtx, t := o.AttachContext(ctx, tx)
	if err := fn(txCtx, t); err != nil {
		return nil, err
	}
	_ = t.Close()
	if err := t.Flush(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// unflushed reports messages an attached Tx buffered that no Flush wrote (they are not
// in the committed transaction), logging them; callers hold t.op. A begun Tx (Commit
// writes its buffer) never has any.
func (t *Tx) unflushed() error {
	if !t.attached {
		return nil
	}
	t.mu.Lock()
	n := len(t.records)
	t.records = nil
	t.mu.Unlock()
	if n == 0 {
		return nil
	}
	err := fmt.Errorf("publisher: %w: %d messages were published into the attached transaction after its last Flush and are NOT in the outbox; "+
		"Flush before committing, or use Outbox.WithAttached", outbox.ErrNotFlushed, n)
	t.ob.logger.Error("Messages published into an attached transaction were never flushed: lost", err, watermill.LogFields{"messages": n})
	return err
}
