package dashboard

import (
	"context"
	"sync"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// snapshot is one read of the figures the overview and the lanes view share: the
// store's Stats, the pending count (Count at farFuture), PendingLanes, Leases and
// Members. The five statements run at once, each on a connection of its own, so a
// snapshot takes as long as the slowest of them. Every error is kept with its part.
type snapshot struct {
	At         time.Time
	Stats      outbox.Stats
	StatsErr   error
	Pending    int64
	PendingErr error
	Lanes      []int
	LanesErr   error
	Leases     []outbox.Lease
	LeasesErr  error
	Members    []string
	MembersErr error
	Rate       rate
	Took       time.Duration // how long the read took
}

// staleFor bounds how old a snapshot a page may show while a fresh one is being read.
const staleFor = time.Minute

// snapshots shares one snapshot between every request for Config.SnapshotMaxAge, and
// one read between the requests that wait for it: however many people watch, the
// dashboard reads the backlog at most once per SnapshotMaxAge.
type snapshots struct {
	mu       sync.Mutex
	last     *snapshot
	inflight chan struct{}
}

// snapshot returns the last snapshot when it is at most SnapshotMaxAge old. An older
// one (at most staleFor old) is returned at once too, while a fresh one is read in the
// background for the next request: a page never waits for the backlog count then, and
// shows the instant its figures were read. Otherwise it waits for a fresh read. The
// read runs on its own context (bounded by QueryTimeout), so a viewer who goes away
// does not cancel it for the others; ctx bounds only the wait.
func (h *Handler) snapshot(ctx context.Context) (*snapshot, error) {
	s := &h.snaps
	s.mu.Lock()
	var age time.Duration
	if s.last != nil {
		age = h.now().Sub(s.last.At)
	}
	if s.last != nil && h.config.SnapshotMaxAge > 0 && age < h.config.SnapshotMaxAge {
		last := s.last
		s.mu.Unlock()
		return last, nil
	}
	if s.inflight == nil {
		s.inflight = make(chan struct{})
		go h.readSnapshot(s.inflight)
	}
	if s.last != nil && h.config.SnapshotMaxAge > 0 && age < staleFor {
		last := s.last
		s.mu.Unlock()
		return last, nil
	}
	done := s.inflight
	s.mu.Unlock()
	select {
	case <-done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.last, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *Handler) readSnapshot(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), h.config.QueryTimeout)
	defer cancel()
	now := h.now().UTC()
	snap := &snapshot{At: now}
	var wg sync.WaitGroup
	wg.Go(func() { snap.Stats, snap.StatsErr = h.store.Stats(ctx, now) })
	wg.Go(func() { snap.Pending, snap.PendingErr = h.store.Count(ctx, farFuture) })
	wg.Go(func() { snap.Lanes, snap.LanesErr = h.store.PendingLanes(ctx) })
	wg.Go(func() { snap.Leases, snap.LeasesErr = h.store.Leases(ctx) })
	wg.Go(func() { snap.Members, snap.MembersErr = h.store.Members(ctx) })
	wg.Wait()
	snap.Took = time.Since(now)
	if snap.PendingErr == nil {
		snap.Rate = h.sample(now, snap.Pending)
	}
	h.snaps.mu.Lock()
	h.snaps.last, h.snaps.inflight = snap, nil
	h.snaps.mu.Unlock()
	close(done)
}
