package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// deleteClock wraps the store a forwarder drains through and records when its last
// delete returned: a locked batch's Finish (its delete and commit), a Complete (a lane
// run's fenced delete, token claims' batched deletes). Our drains are timed to that
// instant, as the raw loop is timed to its own last commit. The harness still polls the
// table until it is empty before it stops a drain, but that poll lags the last delete by
// its interval and by a COUNT(*) over the drained table's dead rows, which the raw loop
// did not pay: 6–21 ms on PostgreSQL (0.5–2.3 % of a drain) and 1–7 ms on MariaDB
// (0.03–0.3 %), measured over 14 drains of the drain and Kafka sections (2026-12-06).
//
// It keeps the optional capabilities the forwarder looks for (outbox.BatchLocker,
// outbox.ClaimersHint), so that the forwarder runs the configuration it would run on
// the bare store.
type deleteClock struct {
	outbox.Store
	bl   outbox.BatchLocker
	last atomic.Int64 // UnixNano of the last delete that returned without an error
}

func newDeleteClock(st outbox.Store) (*deleteClock, error) {
	bl, ok := st.(outbox.BatchLocker)
	if !ok {
		return nil, fmt.Errorf("deleteClock: %T is no outbox.BatchLocker", st)
	}
	return &deleteClock{Store: st, bl: bl}, nil
}

func (s *deleteClock) mark() { s.last.Store(time.Now().UnixNano()) }

// lastDelete returns when the last delete returned (zero: none yet).
func (s *deleteClock) lastDelete() time.Time {
	if n := s.last.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (s *deleteClock) Complete(ctx context.Context, p outbox.CompleteParams) (int, error) {
	n, err := s.Store.Complete(ctx, p)
	if err == nil && n > 0 {
		s.mark()
	}
	return n, err
}

func (s *deleteClock) ClaimersHint() int {
	if h, ok := s.Store.(outbox.ClaimersHint); ok {
		return h.ClaimersHint()
	}
	return 0
}

func (s *deleteClock) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	b, err := s.bl.LockBatch(ctx, p)
	if err != nil || b == nil {
		return b, err
	}
	return clockedBatch{LockedBatch: b, clock: s}, nil
}

// clockedBatch marks the clock when its Finish (delete and commit) returns.
type clockedBatch struct {
	outbox.LockedBatch
	clock *deleteClock
}

func (b clockedBatch) Finish(ctx context.Context, p outbox.FinishParams) error {
	err := b.LockedBatch.Finish(ctx, p)
	if err == nil && len(p.Done) > 0 {
		b.clock.mark()
	}
	return err
}
