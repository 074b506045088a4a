package forwarder

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Defaults of Config; a zero field takes its default.
const (
	HandlerNameDefault = "outbox_forwarder"

	// ClaimBatchDefault and InFlightDefault are the unordered batch and window of the
	// default claims (row locks, outbox.BatchLocker). A locked batch costs no per-row
	// claim, so its fixed cost (a transaction) weighs more than a token claim's: 500 and
	// 2000 drained 10-15 % faster than 250 and 1000 in BenchmarkDrain (100,000 rows), and
	// 1000 and 4000 forwarded 3-18 % more than 500 and 2000 into Kafka on PostgreSQL in 7
	// of 8 paired sets (medians 1.04 against 0.93 of the hand-written loop), the other
	// targets and databases within the noise. The larger window holds more messages:
	// a 1,000,000-row drain peaked at 31-41 MiB of RSS instead of 25-31
	// (benchmarks/README.md, 2026-12-06); lower both to spend less memory.
	ClaimBatchDefault = 1000
	InFlightDefault   = 4000

	// TokenClaimBatchDefault and TokenInFlightDefault replace them with TokenClaims (set,
	// or taken for a store without outbox.BatchLocker). They were chosen by draining
	// queued rows into a no-op publisher on the test machines: against 100 rows and 256
	// in flight, 250 and 1000 doubled the rate on PostgreSQL and MariaDB, where a claim's
	// fixed cost (one statement) dominates small batches; larger values gained little more.
	TokenClaimBatchDefault = 250
	TokenInFlightDefault   = 1000

	ClaimersDefault        = 2
	LaneBatchDefault       = 512
	LaneStatementsDefault  = 4
	KeysInFlightDefault    = 16
	ClaimTTLDefault        = 30 * time.Second
	LeaseTTLDefault        = 10 * time.Second
	PollIntervalDefault    = 100 * time.Millisecond
	MaxPollIntervalDefault = time.Second
	RetryBaseDefault       = 100 * time.Millisecond
	RetryMaxDefault        = 30 * time.Second
	RetryJitterDefault     = 0.2
	MaxAttemptsDefault     = 10
	ShutdownTimeoutDefault = 10 * time.Second
	StatsIntervalDefault   = 5 * time.Second
	CompleteDelayDefault   = 2 * time.Millisecond
)

// Config configures a Forwarder. It is passed by value; zero fields take their
// defaults (the XxxDefault constants).
type Config struct {
	// HandlerName names the router handler that AddToRouter adds; it must be unique in
	// the router, so give each forwarder (each outbox table) its own. Defaults to
	// HandlerNameDefault.
	HandlerName string
	// Owner names this instance in lane leases and heartbeats. It must be unique among
	// the forwarders of one table. Defaults to host-pid-random.
	Owner string

	// ClaimBatch bounds the unordered rows taken by one claim. Defaults to
	// ClaimBatchDefault, or TokenClaimBatchDefault with TokenClaims.
	ClaimBatch int
	// InFlight is the window of unordered messages handed to the handler and not yet
	// acked or nacked; target publishers batch or pipeline within it. Defaults to
	// InFlightDefault, or TokenInFlightDefault with TokenClaims.
	InFlight int
	// Claimers is the number of unordered claim loops, each with its share of InFlight;
	// more than one keeps a claim on the wire while another batch is being emitted.
	// Defaults to ClaimersDefault, or with row locks to the store's
	// outbox.ClaimersHint when it has one (package postgres: 3).
	Claimers int
	// LaneBatch bounds the head run of a lane that a lane worker reads at once (one
	// statement), sends in order and deletes with one statement. Defaults to
	// LaneBatchDefault.
	LaneBatch int
	// KeysInFlight bounds the ordering keys of one lane run that are sent at once. A
	// key's rows go one after another in lane order (one Publish call for consecutive rows
	// of one topic with Run; one message at a time, each after the previous one's ack,
	// through a router), while the other keys of the run do not wait for them. A lane
	// holds many keys (about keys ÷ Options.Lanes), so this is what keeps more than one
	// call per lane on the wire to a target that takes time per call: up to held lanes ×
	// KeysInFlight calls (Run) or messages (router) at once, 64 × 16 = 1,024 with the
	// defaults. After a key's row fails, the run starts no further key, so a target
	// outage costs a lane at most KeysInFlight attempts per retry. 1 sends each run
	// strictly in lane order, one row (or Publish call) at a time, as StopLaneOnPoison
	// always does. Defaults to KeysInFlightDefault.
	KeysInFlight int
	// LaneStatements bounds the statements (head reads, run deletes) that the lane
	// workers of this forwarder run at once: with many lanes, a few statements at a time
	// keep the database's work and its lock contention low. Defaults to
	// LaneStatementsDefault.
	LaneStatements int

	// ClaimTTL is how long a claim of unordered rows lasts; claims of rows still in
	// flight are renewed before it runs out, so it only matters when a forwarder dies.
	// Lane rows are never claimed (the lane's lease covers them). Defaults to
	// ClaimTTLDefault.
	ClaimTTL time.Duration
	// LeaseTTL is how long a lane lease and a heartbeat last; both are renewed every
	// LeaseTTL/3. A dead forwarder's lanes move to the others after at most LeaseTTL.
	// At least 30ms and at most outbox.MaxTTL (24h). Defaults to LeaseTTLDefault.
	LeaseTTL time.Duration

	// PollInterval is the delay between polls while rows keep coming; empty polls double
	// it up to MaxPollInterval. A Notify wakes the forwarder at once. It is also the
	// longest an unordered claimer walks a backlog with its ID cursor before it claims
	// from the beginning again, and the lane scout's interval after a lane received rows.
	// Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// MaxPollInterval bounds the idle backoff of PollInterval. Defaults to
	// MaxPollIntervalDefault (raised to PollInterval when below it).
	MaxPollInterval time.Duration

	// RetryBase and RetryMax bound the exponential backoff of a nacked row:
	// RetryBase*2^(attempts-1), capped at RetryMax, spread by ±RetryJitter (0..1; a
	// negative value disables jitter). They default to RetryBaseDefault, RetryMaxDefault
	// and RetryJitterDefault.
	RetryBase   time.Duration
	RetryMax    time.Duration
	RetryJitter float64
	// MaxAttempts is the number of failed attempts after which a row is parked. Defaults
	// to MaxAttemptsDefault.
	MaxAttempts int

	// StopLaneOnPoison stops a lane while it holds a parked row (until the row is
	// requeued or purged) instead of continuing with the lane's next rows. Defaults to
	// false.
	StopLaneOnPoison bool
	// HoldParkedKeys holds the later rows of an ordering key while an earlier row of that
	// key is parked; the other keys of the lane flow on. Defaults to false.
	HoldParkedKeys bool

	// TokenClaims claims unordered rows by writing a claim token (and its expiry) to each
	// row, in one UPDATE per batch (SKIP LOCKED / READPAST), instead of locking them.
	//
	// By default (on a store implementing outbox.BatchLocker, as all three dialects do)
	// a claimer locks a batch in an open transaction, sends it, and deletes the sent rows
	// and records the failures in that same transaction, with up to
	// InFlight/Claimers/ClaimBatch batches open at once per claimer. That saves the claim
	// UPDATE of every row: the drain runs about twice as fast (benchmarks/README.md), and
	// the rows of a process that dies are eligible again at once (its locks go with its
	// connections) instead of after ClaimTTL. Its prices: each open batch holds an open
	// transaction and a pooled connection while its messages are on the wire (with the
	// defaults up to 4 per forwarder: size the pool for them), for as long as emitting
	// the batch takes plus at most min(1s, ClaimTTL/4) for the slowest acks (rows still
	// in flight then move to a token claim, renewed while they wait); and a failed commit
	// (a lost connection) sends the batch's acked rows again (at least once).
	//
	// What TokenClaims buys: no open transaction and no pooled connection are held while
	// a batch is on the wire; between its statements a claim holds nothing but the token
	// on its rows. Use it when the pool is small or long transactions are unwelcome (they
	// add to replication lag, hold back vacuum or purge, or trip long-transaction alerts).
	// It costs the per-row claim UPDATE (about half the drain rate), and a dead
	// forwarder's rows wait for their claims to expire (ClaimTTL).
	//
	// Defaults to false. A store without outbox.BatchLocker (a custom outbox.Store) falls
	// back to token claims: New logs it at info level and sets TokenClaims in the
	// configuration (Forwarder.Config reports it). With TokenClaims, zero ClaimBatch and
	// InFlight default to TokenClaimBatchDefault and TokenInFlightDefault.
	TokenClaims bool

	// DisableOrdered and DisableUnordered turn off one kind of rows (for example to run
	// ordered lanes in a dedicated process); not both. They default to false.
	DisableOrdered   bool
	DisableUnordered bool

	// ShutdownTimeout bounds how long Close waits for messages in flight. Defaults to
	// ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// StatsInterval is how often the backlog (store.Stats) is sampled for Stats and
	// Metrics (first one interval after the start); negative disables sampling. Defaults
	// to StatsIntervalDefault.
	StatsInterval time.Duration
	// CompleteDelay is how long acks of unordered rows are coalesced into one delete.
	// Defaults to CompleteDelayDefault.
	CompleteDelay time.Duration

	// Now is the clock; every instant given to the store (claim and lease expiries, due
	// times) comes from it, while waits and intervals run on real time. Tests shift it
	// to simulate clock skew or a paused process. Defaults to time.Now.
	Now func() time.Time
	// Metrics receives counters and gauges; see package forwarder/prometheus for a
	// Prometheus adapter. Defaults to nil: no metrics.
	Metrics Metrics

	// Wake, when set, delivers the commits of other processes (the application's
	// writers) so that they are sent at once instead of at the next poll: a
	// postgres.Listener (LISTEN/NOTIFY) or a wakeup.Source (wake-up messages over any
	// Watermill Pub/Sub). The forwarder runs it from Subscribe to Close; when it cannot
	// work (outbox.ErrWakeUnavailable) the forwarder logs why and polls. Polling goes on
	// either way, as the safety net. Defaults to nil: commits of this process only
	// (a publisher linked to the forwarder) and polling.
	Wake outbox.WakeSource
}

func (c *Config) setDefaults() {
	if c.HandlerName == "" {
		c.HandlerName = HandlerNameDefault
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.TokenClaims {
		setInt(&c.ClaimBatch, TokenClaimBatchDefault)
		setInt(&c.InFlight, TokenInFlightDefault)
	}
	setInt(&c.ClaimBatch, ClaimBatchDefault)
	setInt(&c.InFlight, InFlightDefault)
	setInt(&c.Claimers, ClaimersDefault)
	setInt(&c.LaneBatch, LaneBatchDefault)
	setInt(&c.LaneStatements, LaneStatementsDefault)
	setInt(&c.KeysInFlight, KeysInFlightDefault)
	setInt(&c.MaxAttempts, MaxAttemptsDefault)
	setDur(&c.ClaimTTL, ClaimTTLDefault)
	setDur(&c.LeaseTTL, LeaseTTLDefault)
	setDur(&c.PollInterval, PollIntervalDefault)
	setDur(&c.MaxPollInterval, MaxPollIntervalDefault)
	setDur(&c.RetryBase, RetryBaseDefault)
	setDur(&c.RetryMax, RetryMaxDefault)
	setDur(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	setDur(&c.StatsInterval, StatsIntervalDefault)
	setDur(&c.CompleteDelay, CompleteDelayDefault)
	switch {
	case c.RetryJitter == 0:
		c.RetryJitter = RetryJitterDefault
	case c.RetryJitter < 0:
		c.RetryJitter = 0 // explicitly none
	}
	if c.MaxPollInterval < c.PollInterval {
		c.MaxPollInterval = c.PollInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setDur(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}

// Validate checks c after defaults; every error wraps outbox.ErrInvalidOptions and names
// the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, outbox.InvalidOption("forwarder.Config."+field, format, args...))
	}
	positive := map[string]int{"ClaimBatch": c.ClaimBatch, "InFlight": c.InFlight, "Claimers": c.Claimers, "LaneBatch": c.LaneBatch,
		"KeysInFlight": c.KeysInFlight, "LaneStatements": c.LaneStatements, "MaxAttempts": c.MaxAttempts}
	for _, f := range []string{"ClaimBatch", "InFlight", "Claimers", "LaneBatch", "KeysInFlight", "LaneStatements", "MaxAttempts"} {
		if positive[f] < 1 {
			bad(f, "must be at least 1, got %d", positive[f])
		}
	}
	durs := []struct {
		name string
		d    time.Duration
	}{
		{"ClaimTTL", c.ClaimTTL}, {"LeaseTTL", c.LeaseTTL}, {"PollInterval", c.PollInterval},
		{"MaxPollInterval", c.MaxPollInterval}, {"RetryBase", c.RetryBase}, {"RetryMax", c.RetryMax},
		{"ShutdownTimeout", c.ShutdownTimeout}, {"CompleteDelay", c.CompleteDelay},
	}
	for _, d := range durs {
		if d.d <= 0 {
			bad(d.name, "must be positive, got %s", d.d)
		}
	}
	if c.LeaseTTL > 0 && c.LeaseTTL < 30*time.Millisecond {
		bad("LeaseTTL", "must be at least 30ms, got %s", c.LeaseTTL)
	}
	if c.LeaseTTL > outbox.MaxTTL { // the store refuses leases and heartbeats longer
		bad("LeaseTTL", "must be at most %s (outbox.MaxTTL), got %s", outbox.MaxTTL, c.LeaseTTL)
	}
	if c.ClaimTTL > 0 && c.ClaimTTL < 30*time.Millisecond {
		bad("ClaimTTL", "must be at least 30ms, got %s", c.ClaimTTL)
	}
	if c.InFlight >= 1 && c.Claimers > c.InFlight {
		bad("Claimers", "must not exceed InFlight (%d), got %d", c.InFlight, c.Claimers)
	}
	if c.RetryMax < c.RetryBase {
		bad("RetryMax", "must not be below RetryBase (%s), got %s", c.RetryBase, c.RetryMax)
	}
	if c.RetryJitter > 1 || math.IsNaN(c.RetryJitter) {
		bad("RetryJitter", "must be between 0 and 1, got %v", c.RetryJitter)
	}
	if c.DisableOrdered && c.DisableUnordered {
		bad("DisableOrdered", "and DisableUnordered are both set: nothing to forward")
	}
	if c.HandlerName == "" {
		bad("HandlerName", "must not be empty")
	}
	if c.Owner == "" {
		bad("Owner", "must not be empty")
	}
	if c.Now == nil {
		bad("Now", "must not be nil")
	}
	return errors.Join(errs...)
}

// handBackMargin is how long before the shutdown deadline a locked batch still waiting
// for its messages is rolled back and the rows it handed over to a claim are settled.
func (c *Config) handBackMargin() time.Duration { return min(time.Second, c.ShutdownTimeout/4) }

// backoff returns the delay before the attempt that follows `attempts` failed ones.
func (c *Config) backoff(attempts int) time.Duration {
	if attempts < 1 {
		attempts = 1
	}
	d := float64(c.RetryBase) * math.Pow(2, float64(attempts-1))
	if d > float64(c.RetryMax) || math.IsInf(d, 0) {
		d = float64(c.RetryMax)
	}
	if c.RetryJitter > 0 {
		d *= 1 + c.RetryJitter*(2*rand.Float64()-1)
	}
	if d > float64(c.RetryMax) {
		d = float64(c.RetryMax)
	}
	return time.Duration(d)
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
}
