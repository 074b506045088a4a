package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/batchids"
)

var _ outbox.BatchLocker = (*Store)(nil)

// LockBatch locks up to limit eligible unordered rows in an open READ COMMITTED
// transaction (see outbox.BatchLocker). The rows stay locked, unchanged, until the batch
// is finished or rolled back.
func (s *Store) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	limit := p.Limit
	if limit < 1 {
		return nil, invalid("lock batch", "limit must be at least 1, got %d", limit)
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, wrap("lock batch", err)
	}
	recs, err := s.lockRows(ctx, tx, limit, p.After, p.Now)
	if err != nil {
		_ = tx.Rollback()
		return nil, wrap("lock batch", err)
	}
	if len(recs) == 0 {
		// Nothing locked: do not hold a pooled connection for an empty batch.
		if err := tx.Rollback(); err != nil {
			return nil, wrap("lock batch", err)
		}
		return &lockedBatch{}, nil
	}
	return &lockedBatch{s: s, tx: tx, recs: recs}, nil
}

func (s *Store) lockRows(ctx context.Context, tx *sql.Tx, limit int, after outbox.ID, now time.Time) ([]outbox.Record, error) {
	rows, err := tx.QueryContext(ctx, s.q.lockUnordered, now, limit, after[:])
	if err != nil {
		return nil, err
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	var recs []outbox.Record
	for rows.Next() {
		recs = grow(recs)
		if err := sc.scan(rows, &recs[len(recs)-1]); err != nil {
			rows.Close()
			return nil, err
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	return recs, nil
}

// lockedBatch is the open transaction of one LockBatch; tx is nil once it has ended (or
// when it locked nothing).
type lockedBatch struct {
	s    *Store
	tx   *sql.Tx
	recs []outbox.Record
}

func (b *lockedBatch) Records() []outbox.Record { return b.recs }

// Finish deletes, fails and hands over claims in the batch's transaction, then commits.
func (b *lockedBatch) Finish(ctx context.Context, p outbox.FinishParams) error {
	if b.tx == nil {
		if b.s == nil {
			return ctx.Err() // empty batch: nothing to do
		}
		return errors.New("postgres: finish batch: batch already ended")
	}
	tx := b.tx
	b.tx = nil
	if len(p.Claim) > 0 && (p.Token.IsZero() || p.Until.IsZero()) {
		_ = tx.Rollback()
		return invalid("finish batch", "Claim needs a non-zero Token and an Until")
	}
	if err := b.finish(ctx, tx, p); err != nil {
		_ = tx.Rollback()
		return wrap("finish batch", err)
	}
	return wrap("finish batch", tx.Commit())
}

func (b *lockedBatch) finish(ctx context.Context, tx *sql.Tx, p outbox.FinishParams) error {
	in := batchids.Of(b.recs)
	if ids := in.Keep(p.Done); len(ids) > 0 {
		if _, err := tx.ExecContext(ctx, b.s.q.lockedDelete, idArgs(ids)); err != nil {
			return err
		}
	}
	if ids := in.Keep(p.Claim); len(ids) > 0 {
		if _, err := tx.ExecContext(ctx, b.s.q.lockedClaim, p.Token[:], p.Until, idArgs(ids)); err != nil {
			return err
		}
	}
	failed := p.Failed
	for i := range failed {
		f := &failed[i]
		if !in.Has(f.ID) {
			continue
		}
		var retry any // NULL keeps deliver_at
		if f.RetryAt.After(f.Now) {
			retry = f.RetryAt
		}
		if _, err := tx.ExecContext(ctx, b.s.q.lockedFail, f.ID[:], storableText(f.Error), retry, f.Park); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Rollback releases the locks; it is a no-op once the batch has ended.
func (b *lockedBatch) Rollback() error {
	if b.tx == nil {
		return nil
	}
	tx := b.tx
	b.tx = nil
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return wrap("rollback batch", err)
	}
	return nil
}
