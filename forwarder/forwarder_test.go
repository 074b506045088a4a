package forwarder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

// Zero ClaimBatch and InFlight take the locked-batch defaults, or the smaller token
// defaults with TokenClaims; set values are kept.
func TestConfigDefaultsFollowTokenClaims(t *testing.T) {
	for _, c := range []struct {
		in          Config
		batch, wind int
	}{
		{Config{}, ClaimBatchDefault, InFlightDefault},
		{Config{ClaimBatch: 100}, 100, InFlightDefault},
		{Config{TokenClaims: true}, TokenClaimBatchDefault, TokenInFlightDefault},
		{Config{TokenClaims: true, ClaimBatch: 100}, 100, TokenInFlightDefault},
		{Config{TokenClaims: true, InFlight: 300}, TokenClaimBatchDefault, 300},
	} {
		got := c.in
		got.setDefaults()
		if got.ClaimBatch != c.batch || got.InFlight != c.wind {
			t.Errorf("%+v: ClaimBatch %d InFlight %d, want %d %d", c.in, got.ClaimBatch, got.InFlight, c.batch, c.wind)
		}
	}
}

// Claimers defaults to the store's outbox.ClaimersHint with row locks (PostgreSQL: 3),
// to ClaimersDefault otherwise; a value set in Config wins.
func TestClaimersFollowTheStoresHint(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		hinted := ClaimersDefault
		if h, ok := tb.store.(outbox.ClaimersHint); ok {
			hinted = h.ClaimersHint()
		}
		if tb.d.name == "postgres" && hinted != 3 {
			t.Fatalf("PostgreSQL's hint %d, want 3", hinted)
		}
		for _, c := range []struct {
			st   outbox.Store
			in   Config
			want int
		}{
			{tb.store, Config{}, hinted},
			{tb.store, Config{Claimers: 5}, 5},
			{tb.store, Config{TokenClaims: true}, ClaimersDefault},
			{&outageStore{Store: tb.store}, Config{}, ClaimersDefault}, // no BatchLocker
		} {
			f, err := New(c.st, Targets{"": newRecorder()}, c.in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Config().Claimers; got != c.want {
				t.Errorf("%T, %+v: Claimers %d, want %d", c.st, c.in, got, c.want)
			}
		}
	})
}

func TestConfigValidate(t *testing.T) {
	var c Config
	c.setDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.HandlerName != HandlerNameDefault || c.InFlight != InFlightDefault || c.LeaseTTL != LeaseTTLDefault || c.Owner == "" {
		t.Fatalf("defaults not applied: %+v", c)
	}
	cases := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.ClaimBatch = -1 }, "ClaimBatch"},
		{func(c *Config) { c.InFlight = -5 }, "InFlight"},
		{func(c *Config) { c.RetryJitter = 1.5 }, "RetryJitter"},
		{func(c *Config) { c.RetryMax = time.Millisecond }, "RetryMax"},
		{func(c *Config) { c.LeaseTTL = time.Millisecond }, "LeaseTTL"},
		{func(c *Config) { c.LeaseTTL = outbox.MaxTTL + time.Second }, "at most 24h0m0s"}, // every lease call would fail
		{func(c *Config) { c.DisableOrdered, c.DisableUnordered = true, true }, "DisableOrdered"},
		{func(c *Config) { c.PollInterval = -time.Second }, "PollInterval"},
	}
	for _, tc := range cases {
		c := Config{}
		tc.mut(&c)
		c.setDefaults()
		err := c.Validate()
		if !errors.Is(err, outbox.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v", tc.want, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	c := Config{RetryBase: 100 * time.Millisecond, RetryMax: time.Second, RetryJitter: 0.2}
	c.setDefaults()
	for attempts, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 60: time.Second} {
		for range 50 {
			got := c.backoff(attempts)
			lo := time.Duration(float64(want) * 0.8)
			if got < lo || got > want*12/10 || got > c.RetryMax {
				t.Fatalf("backoff(%d) = %s, want %s ±20%% capped at %s", attempts, got, want, c.RetryMax)
			}
		}
	}
}

func TestBackoffWithoutJitter(t *testing.T) {
	c := Config{RetryBase: 100 * time.Millisecond, RetryMax: time.Second, RetryJitter: -1}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for attempts, want := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 10: time.Second} {
		if got := c.backoff(attempts); got != want {
			t.Errorf("backoff(%d) = %s, want exactly %s", attempts, got, want)
		}
	}
}

func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		members []string
		owner   string
		lanes   int
		want    int
	}{
		{nil, "a", 64, 64},
		{[]string{"a", "b"}, "a", 64, 32},
		{[]string{"a", "b", "c"}, "a", 64, 22},
		{[]string{"a", "b", "c"}, "b", 64, 21},
		{[]string{"a", "c"}, "b", 64, 21}, // self missing from the list (heartbeat not seen yet)
		{[]string{"a", "b", "c", "d", "e"}, "e", 3, 0},
	} {
		got, _, _ := fairShare(tc.members, tc.owner, tc.lanes)
		if got != tc.want {
			t.Errorf("fairShare(%v, %s, %d) = %d, want %d", tc.members, tc.owner, tc.lanes, got, tc.want)
		}
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	tb := newTable(t, dialects[1], 4)
	if _, err := New(tb.store, nil, Config{}, nil); !errors.Is(err, outbox.ErrInvalidOptions) || !strings.Contains(err.Error(), "targets") {
		t.Fatalf("no targets: %v", err)
	}
	if _, err := New(tb.store, Targets{"": nil}, Config{}, nil); !errors.Is(err, outbox.ErrInvalidOptions) {
		t.Fatalf("nil publisher: %v", err)
	}
	if _, err := New(tb.store, Targets{"": newRecorder()}, Config{MaxAttempts: -1}, nil); !errors.Is(err, outbox.ErrInvalidOptions) || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("bad config: %v", err)
	}
}

// Unordered rows arrive at a real (in-memory) pub/sub with UUID, metadata and payload
// intact, and are deleted.
func TestForwardUnorderedIntact(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1000}, watermill.NopLogger{})
		defer gc.Close()
		topic := "orders"
		sub, err := gc.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		want := map[string]outbox.Record{}
		var recs []outbox.Record
		for i := range n {
			r := tb.row(topic, "", strings.Repeat("x", i%7)+"payload")
			md := message.Metadata{"i": string(rune('a' + i%26)), "empty": "", "bin": "\x00\xff"}
			r.Headers = headercodec.EncodeMetadata(nil, md)
			recs = append(recs, r)
			want[r.MessageUUID] = r
		}
		tb.insert(t, recs...)
		_, _ = start(t, tb.store, Targets{"": gc}, fastConfig())

		for range n {
			select {
			case m := <-sub:
				r, ok := want[m.UUID]
				if !ok {
					t.Fatalf("unexpected or duplicate message %s", m.UUID)
				}
				delete(want, m.UUID)
				if !bytes.Equal(m.Payload, r.Body) {
					t.Fatalf("payload %q, want %q", m.Payload, r.Body)
				}
				md, _ := headercodec.DecodeMetadata(r.Headers)
				if len(m.Metadata) != len(md) {
					t.Fatalf("metadata %v, want %v", m.Metadata, md)
				}
				for k, v := range md {
					if m.Metadata.Get(k) != v {
						t.Fatalf("metadata %q = %q, want %q", k, m.Metadata.Get(k), v)
					}
				}
				m.Ack()
			case <-time.After(20 * time.Second):
				t.Fatalf("%d messages missing", len(want))
			}
		}
		waitFor(t, 10*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
	})
}

// The handler republishes under the row's destination to the row's transport, with the
// row in the context.
func TestHandlerRoutesByTransport(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		def, kafka := newRecorder(), newRecorder()
		a := tb.row("topic-a", "", "a")
		b := tb.row("topic-b", "key-b", "b")
		b.Transport = "kafka"
		tb.insert(t, a, b)
		_, _ = start(t, tb.store, Targets{"": def, "kafka": kafka}, fastConfig())
		waitFor(t, 10*time.Second, "both sent", func() bool { return len(def.got()) == 1 && len(kafka.got()) == 1 })
		ga, gb := def.got()[0], kafka.got()[0]
		if ga.topic != "topic-a" || ga.msg.UUID != a.MessageUUID || ga.row.ID != a.ID || ga.row.Lane != outbox.Unordered {
			t.Fatalf("default transport got %+v", ga)
		}
		if gb.topic != "topic-b" || gb.msg.UUID != b.MessageUUID || gb.row.OrderingKey != "key-b" || gb.row.Lane != b.Lane || gb.row.Transport != "kafka" {
			t.Fatalf("kafka transport got %+v", gb)
		}
		waitFor(t, 5*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
	})
}

// Rows that cannot be sent are parked with the reason; the others flow.
func TestUnsendableRowsParked(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		good := tb.row("t", "", "good")
		goodKeyed := tb.row("t", "k1", "good2")
		unknown := tb.row("t", "", "unknown")
		unknown.Transport = "nope"
		unknownKeyed := tb.row("t", "k1", "unknown2")
		unknownKeyed.Transport = "nope"
		noDest := tb.row("", "", "nodest")
		corrupt := tb.row("t", "", "corrupt")
		after := tb.row("t", "k1", "after")
		tb.insert(t, good, unknown, unknownKeyed, noDest, corrupt, goodKeyed, after)
		tb.corruptHeaders(t, corrupt.ID)
		f, _ := start(t, tb.store, Targets{"": rec}, fastConfig())
		waitFor(t, 10*time.Second, "good rows sent and bad ones parked", func() bool {
			return len(rec.got()) == 3 && len(tb.parked(t)) == 4
		})
		reasons := map[outbox.ID]string{}
		for _, p := range tb.parked(t) {
			reasons[p.ID] = p.LastError
		}
		for id, want := range map[outbox.ID]string{unknown.ID: `unknown transport "nope"`, unknownKeyed.ID: "unknown transport", noDest.ID: "missing destination", corrupt.ID: "corrupt"} {
			if !strings.Contains(reasons[id], want) {
				t.Errorf("row %s parked with %q, want it to mention %q", id, reasons[id], want)
			}
		}
		waitUnordered(t, f, func(s LaneSnapshot) bool { return s.Parked == 3 && s.Sent == 1 })
	})
}

// The table holds a lane this forwarder cannot own: the router refuses to start.
func TestRefusesTableWithLanesOutOfRange(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		wide := tb.withLanes(t, 16)
		r := wide.row("t", keyInLane(12, 16, 0), "x")
		wide.insert(t, r)
		narrowOpts := wide.opts
		narrowOpts.Lanes = 8
		narrow, err := wide.d.newStore(wide.db, narrowOpts)
		if err != nil {
			t.Fatal(err)
		}
		f, err := New(narrow, Targets{"": newRecorder()}, fastConfig(), nil)
		if err != nil {
			t.Fatal(err)
		}
		router, _ := message.NewRouter(message.RouterConfig{}, nil)
		if _, err := f.AddToRouter(router); err != nil {
			t.Fatal(err)
		}
		err = router.Run(context.Background())
		if !errors.Is(err, outbox.ErrLaneOutOfRange) || !strings.Contains(err.Error(), "lane 12") {
			t.Fatalf("router run: %v", err)
		}
		if _, err := f.Subscribe(context.Background(), "x"); !errors.Is(err, outbox.ErrLaneOutOfRange) {
			t.Fatalf("subscribe: %v", err)
		}
		if wide.rows(t) != 1 {
			t.Fatal("row touched")
		}
	})
}

// A writer with a larger lane count that starts after the forwarder's startup check makes
// Health fail with ErrLaneOutOfRange instead of its rows waiting unnoticed.
func TestHealthReportsLanesOutOfRange(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		wide := tb.withLanes(t, 16)
		narrowOpts := wide.opts
		narrowOpts.Lanes = 8
		narrow, err := wide.d.newStore(wide.db, narrowOpts)
		if err != nil {
			t.Fatal(err)
		}
		f, err := New(narrow, Targets{"": newRecorder()}, fastConfig(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Health(context.Background(), time.Hour); err != nil {
			t.Fatalf("health of an empty table: %v", err)
		}
		wide.insert(t, wide.row("t", keyInLane(12, 16, 0), "x"))
		err = f.Health(context.Background(), time.Hour)
		if !errors.Is(err, outbox.ErrLaneOutOfRange) || !strings.Contains(err.Error(), "lane 12") {
			t.Fatalf("health with a row in lane 12 of 8: %v", err)
		}
	})
}

// Several forwarders (tables) fit in one router under their handler names.
func TestTwoForwardersOneRouter(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb2 := tb.withLanes(t, 4)
		rec := newRecorder()
		tb.insert(t, tb.row("one", "", "1"), tb.row("one", "k", "1k"))
		tb2.insert(t, tb2.row("two", "", "2"), tb2.row("two", "k", "2k"))
		r, _ := message.NewRouter(message.RouterConfig{}, nil)
		for i, st := range []outbox.Store{tb.store, tb2.store} {
			cfg := fastConfig()
			cfg.HandlerName = []string{"fwd_one", "fwd_two"}[i]
			f, err := New(st, Targets{"": rec}, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.AddToRouter(r); err != nil {
				t.Fatal(err)
			}
			if _, err := f.AddToRouter(r); err == nil {
				t.Fatal("second AddToRouter with the same handler name accepted")
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		waitFor(t, 10*time.Second, "4 messages", func() bool { return len(rec.got()) == 4 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// Notify wakes the claimer at once: with a poll interval far above the deadline, a
// notified row arrives long before the next poll could find it.
func TestNotifyWakesWithoutPolling(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		cfg := fastConfig()
		cfg.PollInterval, cfg.MaxPollInterval = time.Hour, time.Hour
		polls := &countingStore{Store: tb.store}
		f, _ := start(t, polls, Targets{"": rec}, cfg)
		key := keyInLane(3, tb.opts.Lanes, 0)
		waitFor(t, 5*time.Second, "lanes held", func() bool { return len(f.Stats().HeldLanes) == tb.opts.Lanes })
		time.Sleep(50 * time.Millisecond) // let every worker reach its (hour-long) idle wait
		before := polls.claims.Load()

		for i := range 3 {
			u := tb.row("t", "", "u")
			o := tb.row("t", key, "o")
			tb.insert(t, u, o)
			f.Notify(outbox.Commit{Lanes: []int{o.Lane}, Unordered: 1})
			waitFor(t, 5*time.Second, "notified rows sent", func() bool { return len(rec.got()) == 2*(i+1) })
		}
		// Each wake-up costs one claim per woken loop plus the follow-ups of a partial
		// batch, never a poll of every lane.
		if got := polls.claims.Load() - before; got > 24 {
			t.Fatalf("%d claims for 3 notified commits: polling, not notification", got)
		}
	})
}

// The lane scout keeps idle workers of empty lanes from polling: over an empty table a
// forwarder holding every lane makes no lane claim at all, only PendingLanes probes
// (backing off to MaxPollInterval). A row committed by another process (no Notify) in
// an empty lane is still found by the scout and sent.
func TestLaneScoutLeavesEmptyLanesAlone(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.PollInterval, cfg.MaxPollInterval = 10*time.Millisecond, 100*time.Millisecond
		polls := &countingStore{Store: tb.store}
		f, _ := start(t, polls, Targets{"": rec}, cfg)
		waitFor(t, 5*time.Second, "lanes held", func() bool { return len(f.Stats().HeldLanes) == tb.opts.Lanes })
		time.Sleep(100 * time.Millisecond)
		claims, probes := polls.claims.Load(), polls.pendingLanes.Load()
		time.Sleep(time.Second)
		claims, probes = polls.claims.Load()-claims, polls.pendingLanes.Load()-probes
		t.Logf("idle second with %d lanes: %d lane claims, %d PendingLanes probes", tb.opts.Lanes, claims, probes)
		if claims != 0 {
			t.Errorf("%d lane claims in an idle second over empty lanes, want 0", claims)
		}
		if probes < 5 || probes > 30 {
			t.Errorf("%d PendingLanes probes in an idle second, want about 1/MaxPollInterval (10)", probes)
		}
		r := tb.row("t", keyInLane(5, tb.opts.Lanes, 0), "from another process")
		tb.insert(t, r) // no Notify: only the scout can find it
		waitFor(t, 5*time.Second, "row of another process sent", func() bool { return len(rec.got()) == 1 })
	})
}

// metricsSpy records what the forwarder reports.
type metricsSpy struct {
	mu                   sync.Mutex
	sent, failed, parked map[int]int
	backlog              []outbox.Stats
	held                 int
}

func newSpy() *metricsSpy {
	return &metricsSpy{sent: map[int]int{}, failed: map[int]int{}, parked: map[int]int{}}
}
func (m *metricsSpy) MessageSent(l int)   { m.mu.Lock(); m.sent[l]++; m.mu.Unlock() }
func (m *metricsSpy) MessageFailed(l int) { m.mu.Lock(); m.failed[l]++; m.mu.Unlock() }
func (m *metricsSpy) MessageParked(l int) { m.mu.Lock(); m.parked[l]++; m.mu.Unlock() }
func (m *metricsSpy) InFlight(int, int)   {}
func (m *metricsSpy) LanesHeld(n int)     { m.mu.Lock(); m.held = n; m.mu.Unlock() }
func (m *metricsSpy) Backlog(s outbox.Stats, _ time.Time) {
	m.mu.Lock()
	m.backlog = append(m.backlog, s)
	m.mu.Unlock()
}

// Health fails while an eligible row is older than the threshold and recovers when it
// is sent; the backlog is sampled into Stats and Metrics.
func TestHealthStatsMetrics(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		old := tb.row("t", "", "old")
		old.CreatedAt = time.Now().Add(-time.Minute).UTC()
		oldKeyed := tb.row("t", "hk", "old-keyed")
		oldKeyed.CreatedAt = old.CreatedAt
		tb.insert(t, old, oldKeyed)
		rec := newRecorder()
		gate := make(chan struct{})
		rec.gate = gate
		spy := newSpy()
		cfg := fastConfig()
		cfg.Metrics = spy
		cfg.StatsInterval = 20 * time.Millisecond
		f, err := New(tb.store, Targets{"": rec}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = f.Health(context.Background(), 10*time.Second)
		if !errors.Is(err, outbox.ErrUnhealthy) || !strings.Contains(err.Error(), "unordered rows") || !strings.Contains(err.Error(), fmt.Sprintf("lane %d", oldKeyed.Lane)) {
			t.Fatalf("health with a minute-old backlog: %v", err)
		}
		if err := f.Health(context.Background(), 2*time.Minute); err != nil {
			t.Fatalf("health under a larger threshold: %v", err)
		}
		r, _ := message.NewRouter(message.RouterConfig{}, nil)
		if _, err := f.AddToRouter(r); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		waitFor(t, 5*time.Second, "both in flight", func() bool {
			s := f.Stats()
			var inFlight int64
			for _, l := range s.Lanes {
				inFlight += l.InFlight
			}
			return s.Unordered.InFlight == 1 && inFlight == 1
		})
		rec.mu.Lock()
		rec.gate = nil
		rec.mu.Unlock()
		close(gate)
		waitFor(t, 5*time.Second, "sent", func() bool { return tb.rows(t) == 0 })
		waitFor(t, 5*time.Second, "healthy", func() bool { return f.Health(context.Background(), 10*time.Second) == nil })
		waitFor(t, 5*time.Second, "empty backlog sampled", func() bool {
			spy.mu.Lock()
			defer spy.mu.Unlock()
			return len(spy.backlog) > 0 && len(spy.backlog[len(spy.backlog)-1].Lanes) == 0
		})
		// Counters move right after the delete.
		waitFor(t, 5*time.Second, "sent counted", func() bool {
			spy.mu.Lock()
			defer spy.mu.Unlock()
			return spy.sent[outbox.Unordered] == 1 && spy.sent[oldKeyed.Lane] == 1
		})
		waitFor(t, 5*time.Second, "every lane held", func() bool { return len(f.Stats().HeldLanes) == tb.opts.Lanes })
		s := f.Stats()
		if s.Unordered.Sent != 1 || s.SampledAt.IsZero() {
			t.Fatalf("stats %+v", s)
		}
		spy.mu.Lock()
		if spy.sent[outbox.Unordered] != 1 || spy.sent[oldKeyed.Lane] != 1 || spy.held != tb.opts.Lanes {
			t.Fatalf("metrics sent %v held %d", spy.sent, spy.held)
		}
		spy.mu.Unlock()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := f.Health(context.Background(), time.Hour); !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("health after close: %v", err)
		}
	})
}

// Router middleware wraps the forwarder's handler: Retry absorbs transient publish
// errors within one delivery, so the row is never failed in the store.
func TestRouterMiddlewareApplies(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		var mu sync.Mutex
		calls := 0
		rec.setFail(func(string, *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls <= 2 {
				return errors.New("transient")
			}
			return nil
		})
		tb.insert(t, tb.row("t", "", "x"))
		spy := newSpy()
		cfg := fastConfig()
		cfg.Metrics = spy
		f, err := New(tb.store, Targets{"": rec}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := message.NewRouter(message.RouterConfig{}, nil)
		r.AddMiddleware(middleware.Recoverer, middleware.Retry{MaxRetries: 3, InitialInterval: time.Millisecond}.Middleware)
		if _, err := f.AddToRouter(r); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		waitFor(t, 10*time.Second, "sent and deleted", func() bool { return len(rec.got()) == 1 && tb.rows(t) == 0 })
		cancel()
		<-done
		spy.mu.Lock()
		defer spy.mu.Unlock()
		if spy.failed[outbox.Unordered] != 0 || calls != 3 {
			t.Fatalf("failed %d times in the store, %d publish calls; want 0 and 3", spy.failed[outbox.Unordered], calls)
		}
	})
}

// While the database refuses every call the forwarder backs off (a bounded number of
// attempts, no hot loop) and it recovers unaided when the database is back.
func TestStoreOutageBacksOffAndRecovers(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		st := &outageStore{Store: tb.store}
		cfg := fastConfig() // polls 10ms doubling to 50ms
		f, _ := start(t, st, Targets{"": rec}, cfg)
		waitFor(t, 5*time.Second, "lanes held", func() bool { return len(f.Stats().HeldLanes) == tb.opts.Lanes })
		st.down.Store(true)
		const outage = 500 * time.Millisecond
		key := keyInLane(1, tb.opts.Lanes, 0)
		tb.insert(t, tb.row("t", "", "u"), tb.row("t", key, key+"/0"))
		f.Notify(outbox.Commit{Lanes: []int{lanesOf(t, tb, key)}, Unordered: 1})
		time.Sleep(outage)
		st.down.Store(false)
		refused := st.refused.Load()
		t.Logf("%d calls refused during the outage", refused)
		// 8 lane workers, 2 claimers and the lease manager, each backing off to 50ms:
		// about 11 loops × outage/50ms, far below a hot loop's thousands.
		if limit := int64(11*outage/cfg.MaxPollInterval) * 2; refused > limit {
			t.Fatalf("%d calls refused during a %s outage (limit %d): hot loop", refused, outage, limit)
		}
		waitFor(t, 10*time.Second, "recovered", func() bool { return len(rec.got()) == 2 && tb.rows(t) == 0 })
	})
}

func lanesOf(t *testing.T, tb *table, key string) int {
	t.Helper()
	return tb.row("t", key, "").Lane
}

// Run forwards in a router of its own and shuts down cleanly when ctx ends.
func TestRunStandalone(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		cfg := fastConfig()
		cfg.Owner = "standalone"
		f, err := New(tb.store, Targets{"": rec}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		tb.insert(t, tb.row("t", "", "u"), tb.row("t", "k", "o"))
		waitFor(t, 10*time.Second, "sent", func() bool { return len(rec.got()) == 2 })
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		leases, _ := tb.store.Leases(context.Background())
		for _, l := range leases {
			if l.Owner == "standalone" {
				t.Fatalf("lane %d still leased after Run returned", l.Lane)
			}
		}
	})
}

// A claimer walks a backlog with an ID cursor; a row committed late with an ID below the
// cursor (its transaction began before the others committed) is still found: the claim
// after a batch that was not full starts from the beginning again. PollInterval is an
// hour, so no periodic sweep can be what finds it. Both unordered claim modes.
func TestUnorderedCursorFindsLateLowerIDs(t *testing.T) {
	for _, tokens := range []bool{false, true} {
		t.Run(fmt.Sprintf("TokenClaims=%v", tokens), func(t *testing.T) {
			forEachDialect(t, func(t *testing.T, tb *table) {
				late := tb.row("t", "", "late") // its ID is older than every row below
				const n = 200
				var recs []outbox.Record
				for range n {
					recs = append(recs, tb.row("t", "", "x"))
				}
				tb.insert(t, recs...)
				rec := newRecorder()
				rec.setFail(func(string, *message.Message) error {
					time.Sleep(time.Millisecond) // let the walk take a while
					return nil
				})
				cfg := fastConfig()
				cfg.DisableOrdered = true
				cfg.TokenClaims = tokens
				cfg.Claimers, cfg.ClaimBatch, cfg.InFlight = 1, 10, 20
				cfg.PollInterval, cfg.MaxPollInterval = time.Hour, time.Hour
				f, _ := start(t, tb.store, Targets{"": rec}, cfg)
				waitFor(t, 20*time.Second, "walk past the late row's ID", func() bool { return len(rec.got()) >= 50 })
				tb.insert(t, late)
				f.Notify(outbox.Commit{Unordered: 1})
				waitFor(t, 20*time.Second, "every row sent, the late one too", func() bool { return len(rec.got()) >= n+1 && tb.rows(t) == 0 })
			})
		})
	}
}

// A notified commit of more rows than LaneBatch into a lane the scout last saw empty is
// sent run after run without waiting for the scout's next probe: the scout's flag gates
// only idle polls, not a worker that keeps finding rows.
func TestLaneWorkerKeepsClaimingPastTheScout(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		rec := newRecorder()
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.PollInterval, cfg.MaxPollInterval = 10*time.Millisecond, time.Hour
		f, _ := start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 5*time.Second, "lanes held", func() bool { return len(f.Stats().HeldLanes) == tb.opts.Lanes })
		time.Sleep(2600 * time.Millisecond) // the idle scout now sleeps for seconds between probes
		key := keyInLane(3, tb.opts.Lanes, 0)
		const n = 100 // one run of one key (LaneBatch 512)
		var recs []outbox.Record
		for range n {
			recs = append(recs, tb.row("t", key, "o"))
		}
		tb.insert(t, recs...)
		f.Notify(outbox.Commit{Lanes: []int{recs[0].Lane}})
		waitFor(t, 2*time.Second, "every row of the notified lane sent", func() bool { return len(rec.got()) == n })
	})
}

// refuseFirstFail is a store whose first Fail reports the row no longer claimed (as
// when its claim expired before the completer ran) without recording anything.
type refuseFirstFail struct {
	outbox.Store
	refused atomic.Bool
}

func (s *refuseFirstFail) Fail(ctx context.Context, p outbox.FailParams) (bool, error) {
	if !s.refused.Swap(true) {
		return false, nil
	}
	return s.Store.Fail(ctx, p)
}

// A token claim's failure is counted once the store has recorded it: a Fail the store
// no longer accepts counts nothing (the row comes back when its claim expires), so the
// counters match the attempts stored on the row.
func TestUnorderedFailureCountedOnceRecorded(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		poison := tb.row("t", "", "poison")
		tb.insert(t, poison)
		rec := newRecorder()
		rec.setFail(func(string, *message.Message) error { return errors.New("poison pill") })
		st := &refuseFirstFail{Store: tb.store}
		cfg := fastConfig()
		cfg.DisableOrdered = true
		cfg.TokenClaims = true
		cfg.ClaimTTL = 500 * time.Millisecond // the refused row comes back after it
		cfg.MaxAttempts = 2
		f, _ := start(t, st, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "poison parked", func() bool { return len(tb.parked(t)) == 1 })
		if p := tb.parked(t)[0]; p.Attempts != 2 {
			t.Errorf("parked with attempts %d, want 2", p.Attempts)
		}
		if n := rec.callCount(); n != 3 {
			t.Errorf("%d publish attempts, want 3 (one not recorded)", n)
		}
		waitUnordered(t, f, func(s LaneSnapshot) bool { return s.Failed == 2 && s.Parked == 1 })
	})
}

// A forwarder started while its database cannot be reached comes up by itself: Run's
// startup check retries with backoff instead of returning, and rows flow once the
// database answers. Close during the retries ends Run with ErrClosed.
func TestStartupCheckRetriesWhileDatabaseDown(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		st := &outageStore{Store: tb.store}
		st.down.Store(true)
		rec := newRecorder()
		tb.insert(t, tb.row("t", "", "u"), tb.row("t", "key-a", "o"))
		cfg := fastConfig()
		f, err := New(st, Targets{"": rec}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { done <- f.Run(ctx) }()
		waitFor(t, 10*time.Second, "startup checks refused", func() bool { return st.refused.Load() >= 3 })
		select {
		case err := <-done:
			t.Fatalf("Run returned while the database was down: %v", err)
		default:
		}
		recoverThenStop(t, st, rec, cancel, done, "Run")

		g, err := New(&outageStore{Store: tb.store}, Targets{"": rec}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.Config() // the second forwarder never reaches its database
		gs := g.store.(*outageStore)
		gs.down.Store(true)
		gdone := make(chan error, 1)
		go func() { gdone <- g.Run(context.Background()) }()
		waitFor(t, 10*time.Second, "startup checks refused", func() bool { return gs.refused.Load() >= 1 })
		if err := g.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		select {
		case err := <-gdone:
			if !errors.Is(err, outbox.ErrClosed) {
				t.Fatalf("Run after Close during the startup check = %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after Close during the startup check")
		}
	})
}

// recoverThenStop ends the simulated outage of the startup tests, waits for their two
// rows, then cancels and waits for what runs the forwarder (named what) to return.
func recoverThenStop(t *testing.T, st *outageStore, rec *recorder, cancel context.CancelFunc, done <-chan error, what string) {
	t.Helper()
	st.down.Store(false)
	waitFor(t, 20*time.Second, "both rows sent", func() bool { return len(rec.got()) == 2 })
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return after cancel", what)
	}
}

// In a router (AddToRouter), a database that cannot be reached when the router starts
// does not fail it: the subscription retries the startup check with backoff and the
// rows flow once the database answers; cancelling the router's context while the
// database is down ends the router's Run (the plugin does not hold it).
func TestRouterStartupRetriesWhileDatabaseDown(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb.insert(t, tb.row("t", "", "u"), tb.row("t", "key-a", "o"))
		startDown := func(t *testing.T, rec *recorder) (*outageStore, context.CancelFunc, chan error) {
			st := &outageStore{Store: tb.store}
			st.down.Store(true)
			f, err := New(st, Targets{"": rec}, fastConfig(), nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.AddToRouter(r); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				_ = r.Close() // a handler that never started: Close waits CloseTimeout
				_ = f.Close()
			})
			waitFor(t, 10*time.Second, "startup checks refused", func() bool { return st.refused.Load() >= 3 })
			select {
			case err := <-done:
				t.Fatalf("the router's Run returned while the database was down: %v", err)
			default:
			}
			return st, cancel, done
		}

		rec := newRecorder()
		st, cancel, done := startDown(t, rec)
		recoverThenStop(t, st, rec, cancel, done, "the router's Run")

		_, cancel, done = startDown(t, newRecorder())
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the router's Run cancelled during the startup check = %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the router's Run did not return after its context was cancelled during the startup check")
		}
	})
}
