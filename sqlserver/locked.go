package sqlserver

import (
	"context"
	"database/sql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/batchids"
	"github.com/relayer-go/watermill-outbox/internal/lockedbatch"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
)

var _ outbox.BatchLocker = (*Store)(nil)

// LockBatch locks up to p.Limit eligible unordered rows in an open READ COMMITTED
// transaction (see outbox.BatchLocker): UPDLOCK holds each row's update lock until the
// batch ends, READPAST skips rows another batch or claim holds, and READCOMMITTEDLOCK
// makes it a locking read also under READ_COMMITTED_SNAPSHOT. The rows stay unchanged
// until the batch is finished or rolled back.
func (s *Store) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	return lockedbatch.Lock(ctx, &s.batches, s.db, p.Limit, func(tx *sql.Tx) ([]outbox.Record, error) {
		return s.lockRows(ctx, tx, p)
	})
}

func (s *Store) lockRows(ctx context.Context, tx *sql.Tx, p outbox.LockParams) ([]outbox.Record, error) {
	rows, err := tx.QueryContext(ctx, s.q.lockUnordered,
		named("n", int64(p.Limit)), named("now", p.Now.UTC()), named("after", p.After[:]))
	if err != nil {
		return nil, err
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	return sqlrows.CollectUpTo(rows, p.Dst, p.Limit, sc.scan)
}

// finishBatch runs LockedBatch.Finish's statements in the batch's transaction; the
// batch's update locks become exclusive ones as its rows are changed.
func (s *Store) finishBatch(ctx context.Context, tx *sql.Tx, in batchids.Set, p outbox.FinishParams) error {
	exec := func(query string, args ...any) (int, error) {
		_, err := tx.ExecContext(ctx, query, args...)
		return 0, err
	}
	if ids := in.Keep(p.Done); len(ids) > 0 {
		if _, err := chunkIDs(ids, func(part []outbox.ID) (int, error) {
			return exec(s.q.lockedDelete(len(part)), idArgs(nil, part)...)
		}); err != nil {
			return err
		}
	}
	if ids := in.Keep(p.Claim); len(ids) > 0 {
		base := []any{named("tok", p.Token[:]), named("until", p.Until.UTC())}
		if _, err := chunkIDs(ids, func(part []outbox.ID) (int, error) {
			return exec(s.q.lockedClaim(len(part)), idArgs(base[:len(base):len(base)], part)...)
		}); err != nil {
			return err
		}
	}
	for i := range p.Failed {
		f := &p.Failed[i]
		if !in.Has(f.ID) {
			continue
		}
		retryAt := f.Now // @retry > @now moves deliver_at; passing now itself keeps it
		if f.RetryAt.After(f.Now) {
			retryAt = f.RetryAt
		}
		if _, err := exec(s.q.lockedFail, named("id", f.ID[:]), named("now", f.Now.UTC()),
			named("err", text(f.Error)), named("retry", retryAt.UTC()), named("park", f.Park)); err != nil {
			return err
		}
	}
	return nil
}
