package forwarder

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// lockingConfig is fastConfig (whose unordered claims lock rows by default) with
// unordered rows only.
func lockingConfig() Config {
	cfg := fastConfig()
	cfg.DisableOrdered = true
	return cfg
}

func requireLocker(t *testing.T, tb *table) outbox.BatchLocker {
	t.Helper()
	bl, ok := tb.store.(outbox.BatchLocker)
	if !ok {
		t.Skipf("%s store does not implement outbox.BatchLocker", tb.d.name)
	}
	return bl
}

// With row locks (the default) every unordered row arrives once, intact, with its row in the
// context, and is deleted.
func TestLockingForwardsUnorderedIntact(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			requireLocker(t, tb)
			const n = 300
			want := map[string]outbox.Record{}
			var recs []outbox.Record
			for i := range n {
				r := tb.row("orders", "", strings.Repeat("x", i%7)+"payload")
				recs = append(recs, r)
				want[r.MessageUUID] = r
			}
			tb.insert(t, recs...)
			rec := newRecorder()
			cfg := lockingConfig()
			cfg.ClaimBatch = 50
			// One claimer: a batch whose Finish fails (a MariaDB deadlock between two
			// claimers' transactions) is sent again, which TestLockingConcurrentClaimers allows.
			cfg.Claimers = 1
			// Batch after batch is read into one array (LockParams.Dst): the payloads the
			// recorder keeps must not change.
			f := startEither(t, direct, tb.store, Targets{"": rec}, cfg)
			waitFor(t, 20*time.Second, "rows sent and deleted", func() bool { return len(rec.got()) >= n && tb.rows(t) == 0 })
			for _, p := range rec.got() {
				r, ok := want[p.msg.UUID]
				if !ok {
					t.Fatalf("unexpected or duplicate message %s (%d published, %+v)", p.msg.UUID, len(rec.got()), p.row)
				}
				delete(want, p.msg.UUID)
				if string(p.msg.Payload) != string(r.Body) || p.msg.Metadata.Get("body") != string(r.Body) {
					t.Fatalf("message %s: payload %q metadata %v, want %q", p.msg.UUID, p.msg.Payload, p.msg.Metadata, r.Body)
				}
				if p.topic != "orders" || p.row.ID != r.ID || p.row.Lane != outbox.Unordered {
					t.Fatalf("message %s: topic %q row %+v", p.msg.UUID, p.topic, p.row)
				}
			}
			waitFor(t, 5*time.Second, "stats", func() bool { return f.Stats().Unordered.Sent == n })
			if s := f.Stats().Unordered; s.InFlight != 0 || s.Failed != 0 {
				t.Errorf("unordered stats %+v", s)
			}
		})
	})
}

// A nacked row gets attempts+1 and its error, and is retried after the backoff, then
// sent.
func TestLockingNackRetriesAfterBackoff(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		requireLocker(t, tb)
		r := tb.row("t", "", "flaky")
		tb.insert(t, r)
		rec := newRecorder()
		var mu sync.Mutex
		var tries []time.Time
		rec.setFail(func(string, *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			tries = append(tries, time.Now())
			if len(tries) <= 2 {
				return errors.New("broker down")
			}
			return nil
		})
		cfg := lockingConfig()
		cfg.RetryBase = 300 * time.Millisecond
		cfg.RetryMax = time.Second
		cfg.RetryJitter = -1
		f, _ := start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "row sent after two failures", func() bool { return len(rec.got()) == 1 && tb.rows(t) == 0 })
		got := rec.got()[0]
		if got.row.Attempts != 2 {
			t.Errorf("sent with Row.Attempts %d, want 2", got.row.Attempts)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(tries) != 3 {
			t.Fatalf("%d publish attempts, want 3", len(tries))
		}
		// Backoff after attempt 1 is RetryBase, after attempt 2 twice that (no jitter).
		for i, min := range []time.Duration{cfg.RetryBase, 2 * cfg.RetryBase} {
			if d := tries[i+1].Sub(tries[i]); d < min-50*time.Millisecond {
				t.Errorf("retry %d after %s, want at least %s", i+1, d, min)
			}
		}
		waitUnordered(t, f, func(s LaneSnapshot) bool { return s.Sent == 1 && s.Failed == 2 && s.Parked == 0 })
	})
}

// A row nacked MaxAttempts times is parked with its last error; the others flow.
func TestLockingMaxAttemptsParks(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		requireLocker(t, tb)
		poison, good := tb.row("t", "", "poison"), tb.row("t", "", "good")
		tb.insert(t, poison, good)
		rec := newRecorder()
		rec.setFail(func(_ string, m *message.Message) error {
			if string(m.Payload) == "poison" {
				return errors.New("poison pill")
			}
			return nil
		})
		cfg := lockingConfig()
		cfg.MaxAttempts = 3
		f, _ := start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "poison parked, good sent", func() bool {
			return len(tb.parked(t)) == 1 && len(rec.got()) == 1 && tb.rows(t) == 1
		})
		p := tb.parked(t)[0]
		if p.ID != poison.ID || p.Attempts != 3 || !strings.Contains(p.LastError, "poison pill") {
			t.Errorf("parked %s attempts %d last_error %q", p.ID, p.Attempts, p.LastError)
		}
		waitUnordered(t, f, func(s LaneSnapshot) bool { return s.Sent == 1 && s.Failed == 3 && s.Parked == 1 })
	})
}

// Rows that cannot be sent are parked with the reason in the batch's transaction.
func TestLockingUnsendableRowsParked(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		requireLocker(t, tb)
		good := tb.row("t", "", "good")
		unknown := tb.row("t", "", "unknown")
		unknown.Transport = "nope"
		noDest := tb.row("", "", "nodest")
		corrupt := tb.row("t", "", "corrupt")
		tb.insert(t, good, unknown, noDest, corrupt)
		tb.corruptHeaders(t, corrupt.ID)
		rec := newRecorder()
		f, _ := start(t, tb.store, Targets{"": rec}, lockingConfig())
		waitFor(t, 20*time.Second, "good row sent and bad ones parked", func() bool {
			return len(rec.got()) == 1 && len(tb.parked(t)) == 3 && tb.rows(t) == 3
		})
		reasons := map[outbox.ID]string{}
		for _, p := range tb.parked(t) {
			reasons[p.ID] = p.LastError
		}
		for id, want := range map[outbox.ID]string{unknown.ID: `unknown transport "nope"`, noDest.ID: "missing destination", corrupt.ID: "corrupt"} {
			if !strings.Contains(reasons[id], want) {
				t.Errorf("row %s parked with %q, want it to mention %q", id, reasons[id], want)
			}
		}
		waitUnordered(t, f, func(s LaneSnapshot) bool { return s.Parked == 3 && s.Sent == 1 })
	})
}

// A forwarder closed while its locked batch is still out (a message never acked) rolls
// the batch back shortly before ShutdownTimeout passes, in the batch's own transaction:
// when Close returns its rows are eligible again at once, with their attempts unchanged,
// not after ClaimTTL.
func TestLockingShutdownReleasesOpenBatch(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		bl := requireLocker(t, tb)
		const n = 5
		var recs []outbox.Record
		for i := range n {
			recs = append(recs, tb.row("t", "", "r"+string(rune('0'+i))))
		}
		tb.insert(t, recs...)
		cfg := lockingConfig()
		cfg.Claimers = 1
		cfg.ClaimTTL = time.Minute
		cfg.ShutdownTimeout = time.Second
		f, err := New(tb.store, Targets{"": newRecorder()}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := f.Subscribe(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		var held *message.Message
		select {
		case held = <-msgs:
		case <-time.After(20 * time.Second):
			t.Fatal("no message")
		}
		closed := make(chan struct{})
		go func() {
			_ = f.Close()
			close(closed)
		}()
		go func() {
			for range msgs { // drain: nothing more should come
			}
		}()
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatal("Close did not return")
		}
		held.Ack() // too late: the batch was rolled back
		lb, err := bl.LockBatch(context.Background(), outbox.LockParams{Limit: 2 * n, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lb.Rollback() }()
		got := lb.Records()
		if len(got) != n {
			t.Fatalf("after Close %d rows lockable at once, want %d", len(got), n)
		}
		for _, r := range got {
			if r.Attempts != 0 {
				t.Errorf("row %s attempts %d after rollback, want 0", r.ID, r.Attempts)
			}
		}
		if s := f.Stats().Unordered; s.InFlight != 0 || s.Sent != 0 {
			t.Errorf("unordered stats %+v", s)
		}
	})
}

// Several claimers hold batches at once: every row arrives (at least once: a batch whose
// Finish fails, for example on a deadlock, is rolled back and sent again) and every row
// is deleted.
func TestLockingConcurrentClaimers(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		requireLocker(t, tb)
		const n = 400
		want := map[string]bool{}
		var recs []outbox.Record
		for i := range n {
			r := tb.row("t", "", "c"+strings.Repeat("y", i%5))
			recs = append(recs, r)
			want[r.MessageUUID] = true
		}
		tb.insert(t, recs...)
		rec := newRecorder()
		cfg := lockingConfig()
		cfg.ClaimBatch = 25
		cfg.Claimers = 4
		f, _ := start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 30*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
		seen := map[string]int{}
		for _, p := range rec.got() {
			if !want[p.msg.UUID] {
				t.Fatalf("unexpected message %s", p.msg.UUID)
			}
			seen[p.msg.UUID]++
		}
		if len(seen) != n {
			t.Fatalf("%d distinct rows arrived, want %d", len(seen), n)
		}
		t.Logf("%d messages for %d rows (%d sent again after a failed Finish)", len(rec.got()), n, len(rec.got())-n)
		if s := f.Stats().Unordered; s.InFlight != 0 {
			t.Errorf("unordered stats %+v", s)
		}
	})
}

// hiddenLocker hides the BatchLocker capability of the store it wraps.
type hiddenLocker struct{ outbox.Store }

// A store without outbox.BatchLocker falls back to claim tokens (Config reports
// TokenClaims and the token defaults) and the rows still flow.
func TestLockingFallsBackWithoutBatchLocker(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		st := hiddenLocker{tb.store}
		if _, ok := outbox.Store(st).(outbox.BatchLocker); ok {
			t.Fatal("wrapper still implements BatchLocker")
		}
		recs := []outbox.Record{tb.row("t", "", "a"), tb.row("t", "", "b")}
		tb.insert(t, recs...)
		rec := newRecorder()
		f, _ := start(t, st, Targets{"": rec}, lockingConfig())
		if c := f.Config(); !c.TokenClaims || c.ClaimBatch != TokenClaimBatchDefault || c.InFlight != TokenInFlightDefault {
			t.Errorf("fallback config: TokenClaims %v, ClaimBatch %d, InFlight %d", c.TokenClaims, c.ClaimBatch, c.InFlight)
		}
		waitFor(t, 20*time.Second, "rows sent and deleted", func() bool { return len(rec.got()) == 2 && tb.rows(t) == 0 })
		if s := f.Stats().Unordered; s.Sent != 2 {
			t.Errorf("unordered stats %+v", s)
		}
	})
}

// A slow message does not hold its locked batch: after the hold time the rest of the
// batch commits (its rows deleted while the slow one is still being published) and the
// slow row moves to a claim that is renewed while it waits, past several ClaimTTLs,
// without being sent twice; its ack then deletes it.
func TestLockingSlowMessageHandedOverToClaim(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			requireLocker(t, tb)
			const n = 20
			_, rec, release := insertWithSlowRow(t, tb, n, 3)
			cfg := lockingConfig()
			cfg.Claimers = 1
			cfg.ClaimTTL = 400 * time.Millisecond // hold time 100 ms, renewals every 100 ms
			startEither(t, direct, tb.store, Targets{"": rec}, cfg)
			// Run publishes rows 0-3 in one call, which the slow row holds: they wait with it.
			left := 1
			if direct {
				left = directCallMax
			}
			waitFor(t, 10*time.Second, "the rest of the batch deleted", func() bool { return tb.rows(t) == left })
			time.Sleep(3 * cfg.ClaimTTL) // the slow row's claim must be renewed, not expire
			if got := len(rec.got()); got != n-1 {
				t.Fatalf("%d messages published while the slow one waits, want %d (nothing sent twice)", got, n-1)
			}
			close(release)
			waitFor(t, 10*time.Second, "slow row sent and deleted", func() bool { return len(rec.got()) == n && tb.rows(t) == 0 })
			time.Sleep(200 * time.Millisecond)
			if got := len(rec.got()); got != n {
				t.Fatalf("%d messages for %d rows", got, n)
			}
		})
	})
}

// insertWithSlowRow inserts n rows of which the one at index slow has body "slow", and
// returns a recorder that holds the slow message until release is closed.
func insertWithSlowRow(t *testing.T, tb *table, n, slow int) (recs []outbox.Record, rec *recorder, release chan struct{}) {
	t.Helper()
	for i := range n {
		body := "fast"
		if i == slow {
			body = "slow"
		}
		recs = append(recs, tb.row("t", "", body))
	}
	tb.insert(t, recs...)
	release = make(chan struct{})
	rec = newRecorder()
	rec.setFail(func(_ string, m *message.Message) error {
		if string(m.Payload) == "slow" {
			<-release
		}
		return nil
	})
	return recs, rec, release
}

// Close with a row handed over from a locked batch to a claim (its message still in the
// handler) stays within ShutdownTimeout: the row's claim is given back shortly before
// the deadline, so the row is eligible again at once with its attempts unchanged, and
// the rest of the batch is deleted.
func TestLockingShutdownWithHandedOverRowWithinTimeout(t *testing.T) {
	forEachMode(t, func(t *testing.T, direct bool) {
		forEachDialect(t, func(t *testing.T, tb *table) {
			bl := requireLocker(t, tb)
			recs, rec, release := insertWithSlowRow(t, tb, 10, 2)
			// Run publishes rows 0-3 in one call, which the slow row holds: they wait with it.
			slow := recs[2:3]
			if direct {
				slow = recs[:directCallMax]
			}
			cfg := lockingConfig()
			cfg.Claimers = 1
			cfg.ClaimTTL = 400 * time.Millisecond // hold time 100 ms
			cfg.ShutdownTimeout = time.Second
			f := startEither(t, direct, tb.store, Targets{"": rec}, cfg)
			t.Cleanup(func() { close(release) }) // before the router stops (cleanups run last first)
			waitFor(t, 10*time.Second, "the rest of the batch deleted", func() bool { return tb.rows(t) == len(slow) })
			began := time.Now()
			closed := make(chan struct{})
			go func() {
				_ = f.Close()
				close(closed)
			}()
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				t.Fatal("Close did not return")
			}
			// A bound of the contract (Close is bounded by ShutdownTimeout), with slack for a
			// loaded machine; before handBack, Close took ShutdownTimeout + 1 s here.
			if took := time.Since(began); took > cfg.ShutdownTimeout+700*time.Millisecond {
				t.Errorf("Close took %v with ShutdownTimeout %v", took, cfg.ShutdownTimeout)
			}
			lb, err := bl.LockBatch(context.Background(), outbox.LockParams{Limit: 10, Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lb.Rollback() }()
			got := lb.Records()
			if len(got) != len(slow) {
				t.Fatalf("after Close: lockable %d rows, want the %d held by the slow one, at once: %+v", len(got), len(slow), got)
			}
			for i := range got {
				if got[i].ID != slow[i].ID || got[i].Attempts != 0 {
					t.Fatalf("after Close: lockable row %s with attempts %d, want %s with attempts 0", got[i].ID, got[i].Attempts, slow[i].ID)
				}
			}
		})
	})
}

// failFirstFinish is a store whose first locked batch's Finish fails (rolling back).
type failFirstFinish struct {
	outbox.Store
	bl     outbox.BatchLocker
	failed atomic.Bool
}

func (s *failFirstFinish) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	lb, err := s.bl.LockBatch(ctx, p)
	if err != nil || len(lb.Records()) == 0 || s.failed.Swap(true) {
		return lb, err
	}
	return failingFinish{lb}, nil
}

type failingFinish struct{ outbox.LockedBatch }

func (b failingFinish) Finish(ctx context.Context, p outbox.FinishParams) error {
	_ = b.LockedBatch.Rollback()
	return errors.New("injected: Finish failed")
}

// A locked batch whose Finish fails parked nothing: its parks and failures are counted
// only when the batch commits, so a row parked by the second batch is counted once.
func TestLockingParkCountedOnceCommitted(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		bl := requireLocker(t, tb)
		bad := tb.row("t", "", "bad")
		bad.Transport = "nope"
		good := tb.row("t", "", "good")
		tb.insert(t, bad, good)
		st := &failFirstFinish{Store: tb.store, bl: bl}
		rec := newRecorder()
		f, _ := start(t, st, Targets{"": rec}, lockingConfig())
		// The counters follow the commit that the table shows: wait for both.
		waitFor(t, 20*time.Second, "bad row parked and counted, good row deleted", func() bool {
			return len(tb.parked(t)) == 1 && tb.rows(t) == 1 && f.Stats().Unordered.Parked >= 1
		})
		if !st.failed.Load() {
			t.Fatal("no Finish was made to fail")
		}
		if s := f.Stats().Unordered; s.Parked != 1 || s.Failed != 1 {
			t.Errorf("unordered stats %+v, want Parked 1 and Failed 1 (the rolled-back park not counted)", s)
		}
	})
}

// stuckRelease is a store whose Release waits until its context ends (a database that
// does not answer), recording the context's deadline.
type stuckRelease struct {
	outbox.Store
	bl       outbox.BatchLocker
	mu       sync.Mutex
	deadline time.Time
}

func (s *stuckRelease) LockBatch(ctx context.Context, p outbox.LockParams) (outbox.LockedBatch, error) {
	return s.bl.LockBatch(ctx, p)
}

func (s *stuckRelease) Release(ctx context.Context, p outbox.ReleaseParams) (int, error) {
	if d, ok := ctx.Deadline(); ok {
		s.mu.Lock()
		s.deadline = d
		s.mu.Unlock()
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// The give-back of handed-over rows at shutdown is bounded by the shutdown deadline
// itself, even when the database does not answer: its context ends no later than
// ShutdownTimeout after Close began (it used to start at the deadline and run a second
// past it).
func TestLockingHandBackBoundedByShutdownTimeout(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		bl := requireLocker(t, tb)
		_, rec, release := insertWithSlowRow(t, tb, 10, 2)
		st := &stuckRelease{Store: tb.store, bl: bl}
		cfg := lockingConfig()
		cfg.Claimers = 1
		cfg.ClaimTTL = 400 * time.Millisecond
		cfg.ShutdownTimeout = time.Second
		f, _ := start(t, st, Targets{"": rec}, cfg)
		t.Cleanup(func() { close(release) })
		waitFor(t, 10*time.Second, "the rest of the batch deleted", func() bool { return tb.rows(t) == 1 })
		began := time.Now()
		_ = f.Close()
		st.mu.Lock()
		deadline := st.deadline
		st.mu.Unlock()
		if deadline.IsZero() {
			t.Fatal("the handed-over row was not given back at shutdown")
		}
		if limit := began.Add(cfg.ShutdownTimeout + 200*time.Millisecond); deadline.After(limit) {
			t.Errorf("give-back ran until %v after Close began, past ShutdownTimeout %v", deadline.Sub(began), cfg.ShutdownTimeout)
		}
	})
}
