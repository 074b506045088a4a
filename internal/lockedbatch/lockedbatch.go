package lockedbatch

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/batchids"
)

// Dialect is what a store gives its locked batches.
type Dialect struct {
	// Name prefixes error texts ("mysql", "postgres", "sqlserver").
	Name string
	// Wrap names the operation and translates a driver error (deadlock → retryable).
	Wrap func(op string, err error) error
	// Finish runs the statements of LockedBatch.Finish in tx, for the IDs of p that are
	// in the batch (in). It does not commit.
	Finish func(ctx context.Context, tx *sql.Tx, in batchids.Set, p outbox.FinishParams) error
	// Retry runs fn again while it fails as a deadlock victim (nil: once).
	Retry func(ctx context.Context, fn func() error) error
}

// Lock is LockBatch: a limit below 1 locks nothing; otherwise it opens a READ COMMITTED
// transaction on db and runs lock in it (again, in a new transaction, when it is chosen
// as a deadlock victim), and returns the batch of the rows lock returns.
func Lock(ctx context.Context, d *Dialect, db *sql.DB, limit int, lock func(tx *sql.Tx) ([]outbox.Record, error)) (outbox.LockedBatch, error) {
	if limit < 1 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return Empty(), nil // the contract: below 1 locks nothing
	}
	var (
		tx   *sql.Tx
		recs []outbox.Record
	)
	attempt := func() error {
		t, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if recs, err = lock(t); err != nil {
			_ = t.Rollback()
			return err
		}
		tx = t
		return nil
	}
	var err error
	if d.Retry != nil {
		err = d.Retry(ctx, attempt)
	} else {
		err = attempt()
	}
	if err != nil {
		return nil, d.Wrap("lock batch", err)
	}
	return Open(d, tx, recs)
}

// Empty is a batch that locked nothing: Finish and Rollback do nothing.
func Empty() outbox.LockedBatch { return &batch{} }

// Open returns the batch of the rows recs locked in tx. A batch without rows is rolled
// back at once: it must not hold a pooled connection.
func Open(d *Dialect, tx *sql.Tx, recs []outbox.Record) (outbox.LockedBatch, error) {
	if len(recs) == 0 {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			return nil, d.Wrap("lock batch", err)
		}
		return Empty(), nil
	}
	return &batch{d: d, tx: tx, recs: recs, in: batchids.Of(recs)}, nil
}

// batch is one open transaction; tx is nil once it has ended, d is nil when it locked
// nothing.
type batch struct {
	d    *Dialect
	tx   *sql.Tx
	recs []outbox.Record
	in   batchids.Set // the IDs as locked: the caller may change or clear recs
}

func (b *batch) Records() []outbox.Record { return b.recs }

// Finish runs the dialect's statements in the batch's transaction, then commits; any
// failure rolls the whole of it back.
func (b *batch) Finish(ctx context.Context, p outbox.FinishParams) error {
	if b.tx == nil {
		if b.d == nil {
			return ctx.Err() // empty batch: nothing to do
		}
		return fmt.Errorf("%s: finish batch: batch already ended", b.d.Name)
	}
	tx := b.tx
	b.tx = nil
	if len(p.Claim) > 0 && (p.Token.IsZero() || p.Until.IsZero()) {
		_ = tx.Rollback()
		return fmt.Errorf("%s: finish batch: Claim needs a non-zero Token and an Until", b.d.Name)
	}
	if err := b.d.Finish(ctx, tx, b.in, p); err != nil {
		_ = tx.Rollback()
		return b.d.Wrap("finish batch", err)
	}
	if err := ctx.Err(); err != nil {
		_ = tx.Rollback()
		return b.d.Wrap("finish batch", err)
	}
	return b.d.Wrap("finish batch", tx.Commit())
}

// Rollback releases the locks; it is a no-op once the batch has ended.
func (b *batch) Rollback() error {
	if b.tx == nil {
		return nil
	}
	tx := b.tx
	b.tx = nil
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return b.d.Wrap("rollback batch", err)
	}
	return nil
}
