package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/batchids"
)

var _ outbox.BatchLocker = (*Store)(nil)

// LockBatch locks up to limit eligible unordered rows in an open READ COMMITTED
// transaction (see outbox.BatchLocker). The rows stay locked, unchanged, until the batch
// is finished or rolled back.
func (s *Store) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	limit := p.Limit
	nowArg, err := timeArg(p.Now)
	if err != nil {
		return nil, fmt.Errorf("mysql: lock batch: now: %w", err)
	}
	if limit <= 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return &lockedBatch{}, nil
	}
	var (
		tx   *sql.Tx
		recs []outbox.Record
	)
	err = retryDeadlocks(ctx, func() error {
		t, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		rows, err := queryB(ctx, t, s.q.claimUnordered, p.After[:], nowArg, nowArg, int64(limit))
		if err == nil {
			recs, err = scanRecords(rows, nil, limit)
		}
		if err != nil {
			_ = t.Rollback()
			return err
		}
		tx = t
		return nil
	})
	if err != nil {
		return nil, wrapErr("lock batch", err)
	}
	if len(recs) == 0 {
		// Nothing locked: do not hold a pooled connection for an empty batch.
		if err := tx.Rollback(); err != nil {
			return nil, wrapErr("lock batch", err)
		}
		return &lockedBatch{}, nil
	}
	return &lockedBatch{s: s, tx: tx, recs: recs}, nil
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
		return errors.New("mysql: finish batch: batch already ended")
	}
	tx := b.tx
	b.tx = nil
	if len(p.Claim) > 0 && (p.Token.IsZero() || p.Until.IsZero()) {
		_ = tx.Rollback()
		return errors.New("mysql: finish batch: Claim needs a non-zero Token and an Until")
	}
	if err := b.finish(ctx, tx, p); err != nil {
		_ = tx.Rollback()
		return wrapErr("finish batch", err)
	}
	if err := tx.Commit(); err != nil {
		return wrapErr("finish batch", err)
	}
	return nil
}

func (b *lockedBatch) finish(ctx context.Context, tx *sql.Tx, p outbox.FinishParams) error {
	in := batchids.Of(b.recs)
	if ids := in.Keep(p.Claim); len(ids) > 0 {
		until, err := timeArg(p.Until)
		if err != nil {
			return fmt.Errorf("Until: %w", err)
		}
		if _, err := execB(ctx, tx, pinnedIDList(b.s.q.setClaim, ids), p.Token[:], until); err != nil {
			return err
		}
	}
	failed := p.Failed
	if ids := in.Keep(p.Done); len(ids) > 0 {
		if _, err := execB(ctx, tx, pinnedIDList(b.s.q.lockedDelete, ids)); err != nil {
			return err
		}
	}
	for i := range failed {
		f := &failed[i]
		if !in.Has(f.ID) {
			continue
		}
		var retry []byte // NULL keeps deliver_at
		if f.RetryAt.After(f.Now) {
			at, err := timeArg(f.RetryAt)
			if err != nil {
				return fmt.Errorf("row %s: RetryAt: %w", f.ID, err)
			}
			retry = []byte(at)
		}
		park := int64(0)
		if f.Park {
			park = 1
		}
		if _, err := execB(ctx, tx, b.s.q.lockedFail, errorText(f.Error), retry, park, f.ID[:]); err != nil {
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
		return wrapErr("rollback batch", err)
	}
	return nil
}

// pinnedIDList completes prefix (ending in "id IN (") with ids and ORDER BY id LIMIT n,
// which pins the statement to primary-key ranges: without it MariaDB scans a small table
// whole, waits on rows other open batches hold, and deadlocks.
func pinnedIDList(prefix string, ids []outbox.ID) string {
	q := make([]byte, 0, len(prefix)+len(ids)*36+32)
	q = append(q, prefix...)
	q = appendIDList(q, ids)
	q = append(q, ") ORDER BY id LIMIT "...)
	q = strconv.AppendInt(q, int64(len(ids)), 10)
	return string(q)
}
