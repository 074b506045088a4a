package forwarder

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneCallStore counts the store calls a lane worker makes (a real store underneath,
// its BatchLocker kept, so that the forwarder runs its default configuration): claims
// of a lane, head reads that found rows, and run deletes with the rows they delete.
type laneCallStore struct {
	outbox.Store
	mu         sync.Mutex
	laneClaims int
	heads      int // Head calls that returned rows
	completes  []int
}

func (s *laneCallStore) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	return s.Store.(outbox.BatchLocker).LockBatch(ctx, p)
}

func (s *laneCallStore) Claim(ctx context.Context, p outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	if p.Lane != outbox.Unordered {
		s.mu.Lock()
		s.laneClaims++
		s.mu.Unlock()
	}
	return s.Store.Claim(ctx, p, dst)
}

func (s *laneCallStore) Head(ctx context.Context, q outbox.HeadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	recs, err := s.Store.Head(ctx, q, dst)
	if len(recs) > 0 {
		s.mu.Lock()
		s.heads++
		s.mu.Unlock()
	}
	return recs, err
}

func (s *laneCallStore) Complete(ctx context.Context, p outbox.CompleteParams) (int, error) {
	if p.Lane != outbox.Unordered {
		s.mu.Lock()
		s.completes = append(s.completes, len(p.IDs))
		s.mu.Unlock()
	}
	return s.Store.Complete(ctx, p)
}

func (s *laneCallStore) counts() (claims, heads int, completes []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.laneClaims, s.heads, append([]int(nil), s.completes...)
}

// An ordered lane is forwarded without a write per row: its worker reads the head run
// (no claim), sends it, and deletes what it sent with one statement per run. With Run,
// the rows of one key, transport and topic in a run go to the target in one Publish
// call; through a router, one message per handler call. 600 rows of two keys in one
// lane with the default LaneBatch (512) are two runs: 2 head reads, 2 deletes, and with
// Run at most 4 Publish calls (one per key and run).
func TestOrderedRunsWithoutClaims(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			tb = tb.withLanes(t, 1)
			const perKey = 300
			var recs []outbox.Record
			for i := range perKey {
				for _, key := range []string{"k0", "k1"} {
					recs = append(recs, tb.row("t", key, fmt.Sprintf("%s/%d", key, i)))
				}
			}
			tb.insert(t, recs...)
			st := &laneCallStore{Store: tb.store}
			rec := newRecorder()
			cfg := fastConfig()
			startEither(t, direct, st, Targets{"": rec}, cfg)
			waitFor(t, 30*time.Second, "every row", func() bool { return countDistinct(t, rec.got()) == len(recs) })
			if _, dups := checkKeyOrder(t, rec.got()); dups != 0 {
				t.Fatalf("%d duplicates", dups)
			}
			// The last run's delete follows its send.
			waitFor(t, 10*time.Second, "the runs deleted", func() bool {
				_, _, completes := st.counts()
				n := 0
				for _, c := range completes {
					n += c
				}
				return n == len(recs)
			})
			claims, heads, completes := st.counts()
			if claims != 0 {
				t.Errorf("%d claims of a lane, want 0 (a lane under a lease is read, not claimed)", claims)
			}
			if heads != 2 || len(completes) != 2 {
				t.Errorf("%d head reads returned rows and %d run deletes %v, want 2 and 2 (LaneBatch %d, %d rows)",
					heads, len(completes), completes, LaneBatchDefault, len(recs))
			}
			calls := rec.callCount()
			switch {
			case direct && calls > 4:
				t.Errorf("Run published %d rows in %d calls, want at most 4 (one per key and run)", len(recs), calls)
			case !direct && calls != len(recs):
				t.Errorf("a router published %d rows in %d calls, want one call per row", len(recs), calls)
			}
		})
	})
}
