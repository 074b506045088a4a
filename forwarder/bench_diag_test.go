package forwarder_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// timedStore wraps a store and accumulates the count, rows and time of each hot call,
// so that a benchmark can say where a forwarder's time goes.
type timedStore struct {
	outbox.Store
	mu    sync.Mutex
	calls map[string]*opStat
}

type opStat struct {
	n     int
	rows  int
	total time.Duration
	max   time.Duration
}

func newTimedStore(s outbox.Store) *timedStore {
	return &timedStore{Store: s, calls: map[string]*opStat{}}
}

func (s *timedStore) note(op string, start time.Time, rows int) {
	d := time.Since(start)
	s.mu.Lock()
	st := s.calls[op]
	if st == nil {
		st = &opStat{}
		s.calls[op] = st
	}
	st.n++
	st.rows += rows
	st.total += d
	st.max = max(st.max, d)
	s.mu.Unlock()
}

func (s *timedStore) Claim(ctx context.Context, c outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	t := time.Now()
	r, err := s.Store.Claim(ctx, c, dst)
	op := "Claim(unordered)"
	if c.Lane != outbox.Unordered {
		op = "Claim(lane)"
	}
	s.note(op, t, len(r))
	return r, err
}

func (s *timedStore) Complete(ctx context.Context, c outbox.CompleteParams) (int, error) {
	t := time.Now()
	n, err := s.Store.Complete(ctx, c)
	s.note("Complete", t, n)
	return n, err
}

func (s *timedStore) Renew(ctx context.Context, r outbox.RenewParams) (int, error) {
	t := time.Now()
	n, err := s.Store.Renew(ctx, r)
	s.note("Renew", t, n)
	return n, err
}

func (s *timedStore) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	t := time.Now()
	st, err := s.Store.Stats(ctx, now)
	s.note("Stats", t, 0)
	return st, err
}

func (s *timedStore) RenewLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	t := time.Now()
	ok, err := s.Store.RenewLease(ctx, l)
	s.note("RenewLease", t, 0)
	return ok, err
}

// String renders one line per operation: calls, rows per call, mean and max latency.
func (s *timedStore) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []string
	for op := range s.calls {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	for _, op := range ops {
		st := s.calls[op]
		fmt.Fprintf(&b, "  %-17s calls=%6d rows/call=%6.1f mean=%8s max=%8s total=%s\n", op, st.n,
			float64(st.rows)/float64(st.n), (st.total / time.Duration(st.n)).Round(time.Microsecond),
			st.max.Round(time.Microsecond), st.total.Round(time.Millisecond))
	}
	return b.String()
}

// lockingTimedStore is a timedStore that also times the BatchLocker calls of a store
// that implements it (only built for drains with row locks, so that TokenClaims drains see a
// store without the capability exactly as before).
type lockingTimedStore struct {
	*timedStore
	bl outbox.BatchLocker
}

func (s lockingTimedStore) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	start := time.Now()
	lb, err := s.bl.LockBatch(ctx, p)
	if err != nil {
		return nil, err
	}
	s.note("LockBatch", start, len(lb.Records()))
	return timedBatch{LockedBatch: lb, s: s.timedStore}, nil
}

type timedBatch struct {
	outbox.LockedBatch
	s *timedStore
}

func (b timedBatch) Finish(ctx context.Context, p outbox.FinishParams) error {
	start := time.Now()
	err := b.LockedBatch.Finish(ctx, p)
	if err != nil {
		b.s.note("Finish(error)", start, len(p.Done))
		return err
	}
	b.s.note("Finish", start, len(p.Done))
	return nil
}
