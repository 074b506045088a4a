package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/batchids"
	"github.com/relayer-go/watermill-outbox/internal/lockedbatch"
)

var _ outbox.BatchLocker = (*Store)(nil)

// LockBatch locks up to limit eligible unordered rows in an open READ COMMITTED
// transaction (see outbox.BatchLocker). The rows stay locked, unchanged, until the batch
// is finished or rolled back.
func (s *Store) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	nowArg, err := timeArg(p.Now)
	if err != nil {
		return nil, fmt.Errorf("mysql: lock batch: now: %w", err)
	}
	return lockedbatch.Lock(ctx, &s.batches, s.db, p.Limit, func(tx *sql.Tx) ([]outbox.Record, error) {
		rows, err := queryB(ctx, tx, s.q.claimUnordered, p.After[:], nowArg, nowArg, int64(p.Limit))
		if err != nil {
			return nil, err
		}
		return scanRecords(rows, p.Dst[:0], p.Limit)
	})
}

// finishBatch runs LockedBatch.Finish's statements in the batch's transaction.
func (s *Store) finishBatch(ctx context.Context, tx *sql.Tx, in batchids.Set, p outbox.FinishParams) error {
	if ids := in.Keep(p.Claim); len(ids) > 0 {
		until, err := timeArg(p.Until)
		if err != nil {
			return fmt.Errorf("Until: %w", err)
		}
		if _, err := execB(ctx, tx, pinnedIDList(s.q.lockedClaim, ids), p.Token[:], until); err != nil {
			return err
		}
	}
	if ids := in.Keep(p.Done); len(ids) > 0 {
		if _, err := execB(ctx, tx, pinnedIDList(s.q.lockedDelete, ids)); err != nil {
			return err
		}
	}
	for i := range p.Failed {
		f := &p.Failed[i]
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
		if _, err := execB(ctx, tx, s.q.lockedFail, errorText(f.Error), retry, park, park, f.ID[:]); err != nil {
			return err
		}
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
