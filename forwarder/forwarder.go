package forwarder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

// Targets maps transport names (Record.Transport) to the publishers that send them. The
// empty name is the default transport.
type Targets map[string]message.Publisher

// Row describes the outbox row a forwarded message came from; RowFromContext returns it
// from the message's context.
type Row struct {
	ID          outbox.ID
	Lane        int // outbox.Unordered or the lane
	OrderingKey string
	Transport   string
	Destination string
	MessageType string
	TenantID    string
	Attempts    int // failed attempts before this one
	CreatedAt   time.Time
	DeliverAt   time.Time
}

// delivery is what the context of an emitted message carries: the row and a slot for
// the handler's error, stored as the row's last_error when the message is nacked.
type delivery struct {
	row  Row
	err  atomic.Pointer[string]
	mark sendMark // whether an ack comes with a publish (acked.go)
}

// RowFromContext returns the row of a message emitted by a Forwarder (from the message's
// context, or any context derived from it).
func RowFromContext(ctx context.Context) (Row, bool) {
	d := deliveryFrom(ctx)
	if d == nil {
		d, _ = ctx.Value(rowKey{}).(*delivery)
	}
	if d == nil {
		return Row{}, false
	}
	return d.row, true
}

// rowKey holds the delivery of a message handed to a target publisher: RowFromContext
// reads it there (a partition key from the row, say), while the forwarded mark that
// publisher.Middleware and the inbox recognise is hidden (targetContext).
type rowKey struct{}

// targetContext is the context of a message handed to a target publisher: ctx without
// the forwarded mark, with the row for RowFromContext. A Pub/Sub that keeps contexts
// then hands other handlers no mark that would make their middleware skip its
// transaction.
func targetContext(ctx context.Context, d *delivery) context.Context {
	return context.WithValue(outbox.WithoutForwarded(ctx), rowKey{}, d)
}

// toTarget gives msg, which Run publishes itself (no copy), the target's context.
func toTarget(msg *message.Message, d *delivery) {
	msg.SetContext(targetContext(msg.Context(), d))
}

// deliveryFrom returns the delivery of a message emitted by this package (marked
// forwarded), or nil.
func deliveryFrom(ctx context.Context) *delivery {
	v, _ := outbox.ForwardedFromContext(ctx)
	d, _ := v.(*delivery)
	return d
}

// Forwarder claims rows of one outbox table and emits them as Watermill messages; its
// Handler republishes them to their targets. It is a message.Subscriber (one
// subscription) and an outbox.Notifier.
type Forwarder struct {
	store   outbox.Store
	opts    outbox.Options
	targets Targets
	cfg     Config
	logger  watermill.LoggerAdapter
	metrics Metrics

	epoch   time.Time     // the monotonic origin of mono
	laneSem chan struct{} // bounds the concurrent statements of lane workers (LaneStatements)
	// direct: Run publishes lane runs straight to the targets (set before Subscribe).
	direct bool

	laneWake      []chan struct{} // one per lane, capacity 1
	unorderedWake []chan struct{} // one per claimer, capacity 1

	mu         sync.Mutex
	subscribed bool
	starting   bool // Subscribe is checking the lanes
	closed     bool
	out        chan *message.Message
	baseCtx    context.Context

	stopping chan struct{} // closed by Close: claim nothing new
	abandon  chan struct{} // closed when the shutdown deadline passed
	// handBack is cancelled handBackMargin before the shutdown deadline (and with
	// hardCtx): a locked batch still waiting for its messages then rolls back in its own,
	// still live, transaction, and rows it handed over to a claim are deleted or
	// released, all within ShutdownTimeout.
	handBack       context.Context
	handBackCancel context.CancelFunc
	closeDeadline  time.Time // when Close gives up; set before handBack is cancelled
	// hardCtx is cancelled with abandon: store calls of the claim loops and lane workers
	// stop waiting for a database that does not answer.
	hardCtx    context.Context
	hardCancel context.CancelFunc
	closeOnce  sync.Once
	closeErr   error
	closeDone  chan struct{}

	acks ackGuard // acks without a publish are failures (acked.go)

	emitters sync.WaitGroup // goroutines that may send on out
	services sync.WaitGroup // lease manager, completers, sampler

	jobs chan storeJob // completes and fails of unordered rows

	counters []laneCounters // index lane+1
	held     []atomic.Bool  // index lane
	members  atomic.Int64
	// lanePending (index lane) is the lane scout's word on whether a lane may hold
	// pending rows (set too by Notify for a committed lane); an idle lane worker polls
	// its lane only while it is true.
	lanePending []atomic.Bool

	gaugeMu     sync.Mutex // orders gauge reports (reportInFlight, reportLanesHeld)
	statsMu     sync.Mutex
	stats       outbox.Stats
	statsAt     time.Time
	parkedLanes map[int]time.Time // StopLaneOnPoison: lanes holding a parked row
}

type laneCounters struct {
	inFlight atomic.Int64
	sent     atomic.Uint64
	failed   atomic.Uint64
	parked   atomic.Uint64
}

// New builds a Forwarder over store. targets must hold at least one publisher; a nil
// logger logs nothing.
func New(store outbox.Store, targets Targets, config Config, logger watermill.LoggerAdapter) (*Forwarder, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: forwarder: store is nil", outbox.ErrInvalidOptions)
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: forwarder: targets: at least one publisher is required", outbox.ErrInvalidOptions)
	}
	for name, p := range targets {
		if p == nil {
			return nil, fmt.Errorf("%w: forwarder: targets: publisher of transport %q is nil", outbox.ErrInvalidOptions, name)
		}
	}
	// The default unordered claims lock rows (outbox.BatchLocker); a store without the
	// capability claims with tokens, as if TokenClaims were set.
	_, locker := store.(outbox.BatchLocker)
	fallback := !config.TokenClaims && !config.DisableUnordered && !locker
	if fallback {
		config.TokenClaims = true
	}
	if h, ok := store.(outbox.ClaimersHint); ok && h.ClaimersHint() > 0 && locker && !config.TokenClaims && config.Claimers == 0 {
		config.Claimers = h.ClaimersHint()
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	opts := store.Options().WithDefaults()
	f := &Forwarder{
		store:         store,
		opts:          opts,
		targets:       targets,
		cfg:           config,
		logger:        logger.With(watermill.LogFields{"outbox_table": opts.OutboxTable(), "owner": config.Owner}),
		metrics:       config.Metrics,
		laneWake:      make([]chan struct{}, opts.Lanes),
		unorderedWake: make([]chan struct{}, config.Claimers),
		stopping:      make(chan struct{}),
		abandon:       make(chan struct{}),
		closeDone:     make(chan struct{}),
		jobs:          make(chan storeJob, config.InFlight),
		counters:      make([]laneCounters, opts.Lanes+1),
		held:          make([]atomic.Bool, opts.Lanes),
		lanePending:   make([]atomic.Bool, opts.Lanes),
		epoch:         time.Now(),
		laneSem:       make(chan struct{}, config.LaneStatements),
		parkedLanes:   map[int]time.Time{},
	}
	// lanePending starts false: workers wait for the scout's first look (which flips
	// and wakes the lanes holding rows) instead of all claiming at once on startup.
	f.hardCtx, f.hardCancel = context.WithCancel(context.Background())
	f.handBack, f.handBackCancel = context.WithCancel(f.hardCtx)
	for i := range f.laneWake {
		f.laneWake[i] = make(chan struct{}, 1)
	}
	for i := range f.unorderedWake {
		f.unorderedWake[i] = make(chan struct{}, 1)
	}
	if f.metrics == nil {
		f.metrics = nopMetrics{}
	}
	if fallback {
		f.logger.Info("Store does not implement outbox.BatchLocker: unordered rows are claimed with tokens (Config.TokenClaims)",
			watermill.LogFields{"store": fmt.Sprintf("%T", store)})
	}
	return f, nil
}

// Config returns the configuration with defaults applied.
func (f *Forwarder) Config() Config { return f.cfg }

// NotifierOptions implements outbox.Notifier: the options of the table this forwarder
// serves.
func (f *Forwarder) NotifierOptions() outbox.Options { return f.store.Options() }

// Notify implements outbox.Notifier: it wakes the workers of the committed lanes held
// here and the unordered claimer. It never blocks; a wake-up that finds one pending is
// merged with it, and lanes held elsewhere are found by their owner's poll. A committed
// lane is marked pending (as the lane scout would on its next look), so that a lane
// this forwarder acquires after the commit (at startup, or taken over from a peer) is
// read at once rather than after the scout's next look (up to MaxPollInterval).
func (f *Forwarder) Notify(c outbox.Commit) {
	for _, lane := range c.Lanes {
		if lane < 0 || lane >= len(f.laneWake) {
			continue
		}
		f.lanePending[lane].Store(true)
		if f.held[lane].Load() {
			wake(f.laneWake[lane])
		}
	}
	if c.Unordered > 0 {
		for _, ch := range f.unorderedWake {
			wake(ch)
		}
	}
}

// runWake runs the wake source until Close starts; a source that cannot work leaves
// the forwarder polling.
func (f *Forwarder) runWake(src outbox.WakeSource) {
	defer f.services.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stopping:
		case <-ctx.Done():
		}
		cancel()
	}()
	err := src.Listen(ctx, f)
	if err != nil && ctx.Err() == nil {
		f.logger.Error("Wake-ups from other processes unavailable: their commits are found by polling", err,
			watermill.LogFields{"poll_interval": f.cfg.PollInterval})
	}
}

// runService runs one of the services Close waits for (f.services, added by the caller).
func (f *Forwarder) runService(run func()) {
	defer f.services.Done()
	run()
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// CheckLanes fails with outbox.ErrLaneOutOfRange when the table holds lane values that
// this forwarder's lane count cannot own (writers use another Lanes setting).
func (f *Forwarder) CheckLanes(ctx context.Context) error {
	maxLane, err := f.store.MaxLane(ctx)
	if err != nil {
		return fmt.Errorf("forwarder: read the greatest lane: %w", err)
	}
	if maxLane >= f.opts.Lanes {
		return fmt.Errorf("%w: table %s holds lane %d but the forwarder has %d lanes (writers and forwarders must use equal Lanes)",
			outbox.ErrLaneOutOfRange, f.opts.OutboxTable(), maxLane, f.opts.Lanes)
	}
	return nil
}

const (
	// checkTimeout bounds one CheckLanes of checkLanesRetrying (a database that hangs).
	checkTimeout = 30 * time.Second
	// routerCheckTimeout bounds AddToRouter's plugin, which a router's context cannot
	// end: a database that hangs holds the router's start this long at most.
	routerCheckTimeout = 5 * time.Second
)

// checkLanesRetrying runs CheckLanes until it answers: a database that cannot be reached
// (down, restarting, a connection killed) is retried with backoff (up to
// MaxPollInterval, each failure logged), so that a forwarder started while its database
// restarts comes up by itself. Lanes out of range, ctx's end and Close end it with an
// error.
func (f *Forwarder) checkLanesRetrying(ctx context.Context) error {
	delay := f.cfg.PollInterval
	var cause error // the last failure that was not ctx's end
	for {
		checkCtx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := f.CheckLanes(checkCtx)
		cancel()
		switch {
		case err == nil, errors.Is(err, outbox.ErrLaneOutOfRange):
			return err
		case ctx.Err() != nil:
			return startupGaveUp(ctx, cause)
		}
		cause = err
		f.logger.Error("Cannot check the outbox table's lanes at startup; retrying", err, watermill.LogFields{"retry_in": delay})
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-f.stopping:
			t.Stop()
			return outbox.ErrClosed
		}
		t.Stop()
		delay = min(2*delay, f.cfg.MaxPollInterval)
	}
}

// Subscribe starts forwarding and returns the channel of messages to handle. topic is
// informational (AddToRouter passes the outbox table name); a Forwarder serves one
// subscription. Cancelling ctx closes the forwarder like Close. It first checks the
// table's lanes (CheckLanes), retrying while the database cannot be reached: it returns
// once the check answered, with outbox.ErrLaneOutOfRange, or when ctx ends or Close
// is called.
func (f *Forwarder) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, outbox.ErrClosed
	}
	if f.subscribed || f.starting {
		f.mu.Unlock()
		return nil, errors.New("forwarder: already subscribed (a Forwarder serves one subscription)")
	}
	f.starting = true
	f.mu.Unlock()
	// Outside the mutex: the check waits for a database that is down, and Close must be
	// able to stop it.
	err := f.checkLanesRetrying(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starting = false
	switch {
	case err != nil:
		return nil, err
	case f.closed:
		return nil, outbox.ErrClosed
	}
	f.subscribed = true
	f.out = make(chan *message.Message)
	// Messages outlive the subscription's cancellation: a send in flight at shutdown
	// should finish, not fail.
	f.baseCtx = context.WithoutCancel(ctx)

	f.services.Add(1)
	go f.runService(newCompleter(f).run)
	if !f.cfg.DisableUnordered {
		f.startClaimers()
	}
	if !f.cfg.DisableOrdered {
		f.services.Add(2)
		go newLaneScout(f).run()
		go newLeaseManager(f).run()
	}
	if f.cfg.StatsInterval > 0 {
		f.services.Add(1)
		go f.runService(newSampler(f).run)
	}
	if f.cfg.Wake != nil {
		f.services.Add(1)
		go f.runWake(f.cfg.Wake)
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = f.Close()
		case <-f.stopping:
		}
	}()
	f.logger.Info("Forwarder started", watermill.LogFields{"topic": topic, "lanes": f.opts.Lanes})
	return f.out, nil
}

// startClaimers starts the unordered claim loops: token claimers with TokenClaims (which
// New set when the store is no BatchLocker), lock claimers otherwise. The window is
// split between them; each claims while the others' claims are on the wire.
func (f *Forwarder) startClaimers() {
	per := (f.cfg.InFlight + f.cfg.Claimers - 1) / f.cfg.Claimers
	bl, _ := f.store.(outbox.BatchLocker)
	for i := range f.cfg.Claimers {
		var run func()
		if f.cfg.TokenClaims {
			run = newTokenClaimer(f, f.unorderedWake[i], per).run
		} else {
			run = newLockClaimer(f, bl, f.unorderedWake[i], per).run
		}
		f.emitters.Add(1)
		go func() {
			defer f.emitters.Done()
			run()
		}()
	}
}

// Close stops claiming, waits up to ShutdownTimeout for the messages in flight, flushes
// their completions, gives back the claims of rows it claimed but did not send (a lane
// worker's queued head rows, an unordered batch not yet emitted), closes the
// subscription's channel, releases every lane lease and leaves the members table, so that
// other forwarders take the rows and lanes over at once. The whole of Close is bounded by
// ShutdownTimeout. It is idempotent.
func (f *Forwarder) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true
		subscribed := f.subscribed
		close(f.stopping)
		f.mu.Unlock()
		defer close(f.closeDone)
		if !subscribed {
			f.hardCancel()
			return
		}
		// One deadline for the whole shutdown: messages in flight, then the deletes,
		// lease releases and Leave. When it passes, store calls are cancelled.
		f.closeDeadline = time.Now().Add(f.cfg.ShutdownTimeout)
		deadline := time.NewTimer(f.cfg.ShutdownTimeout)
		defer deadline.Stop()
		handBack := time.AfterFunc(f.cfg.ShutdownTimeout-f.cfg.handBackMargin(), f.handBackCancel)
		defer handBack.Stop()
		abandoned := false
		abandon := func() {
			f.logger.Info("Shutdown timeout: abandoning what is left (claims expire, leases time out)", watermill.LogFields{"timeout": f.cfg.ShutdownTimeout})
			abandoned = true
			close(f.abandon)
			f.hardCancel()
		}
		emitted := make(chan struct{})
		go func() {
			f.emitters.Wait()
			close(emitted)
		}()
		timedOut := false
		select {
		case <-emitted:
		case <-deadline.C:
			timedOut = true
			abandon()
			<-emitted
		}
		// Deletes flushed, leases released and members left before the subscription
		// ends: a router that returns has let go of everything.
		close(f.jobs)
		serviced := make(chan struct{})
		go func() {
			f.services.Wait()
			close(serviced)
		}()
		select {
		case <-serviced:
		case <-deadline.C:
			if !timedOut {
				abandon()
			}
			<-serviced
		}
		f.hardCancel()
		if !abandoned {
			// Every row is settled, rolled back or handed back: a handler still in a
			// target's Publish (one that never returns) gives its message up now, so
			// that the router's Close returns too.
			close(f.abandon)
		}
		close(f.out)
		f.logger.Info("Forwarder closed", nil)
	})
	<-f.closeDone
	return f.closeErr
}

func (f *Forwarder) isStopping() bool {
	select {
	case <-f.stopping:
		return true
	default:
		return false
	}
}

// emit hands msg to the subscription; false when the forwarder is abandoning. While it
// waits for the router it calls renew every interval, on rt (the emitting goroutine's
// ticker, reused from message to message).
func (f *Forwarder) emit(ctx context.Context, msg *message.Message, rt *renewTicker, every time.Duration, renew func()) bool {
	select {
	case f.out <- msg:
		return true
	default:
	}
	tick := rt.start(every)
	defer rt.stop()
	for {
		select {
		case f.out <- msg:
			return true
		case <-f.abandon:
			return false
		case <-ctx.Done():
			return false
		case <-tick:
			renew()
		}
	}
}

// renewTicker is the renewal ticker of one goroutine that emits and waits for messages
// one after another: made on first use, then reset, so that a busy router does not cost
// a ticker per message.
type renewTicker struct{ t *time.Ticker }

// start (re)starts the ticker with period every.
func (r *renewTicker) start(every time.Duration) <-chan time.Time {
	if r.t == nil {
		r.t = time.NewTicker(every)
	} else {
		r.t.Reset(every)
	}
	return r.t.C
}

// stop pauses the ticker until the next start (no stale tick is delivered after it).
func (r *renewTicker) stop() {
	if r.t != nil {
		r.t.Stop()
	}
}

// invalidReason says why a claimed row cannot be sent at all, or "" when it can.
func (f *Forwarder) invalidReason(rec *outbox.Record) string {
	switch {
	case rec.Corrupt != nil:
		return rec.Corrupt.Error()
	case rec.Destination == "":
		return "forwarder: missing destination (topic)"
	}
	if _, ok := f.targets[rec.Transport]; !ok {
		return fmt.Sprintf("forwarder: unknown transport %q (no target publisher)", rec.Transport)
	}
	return ""
}

// buildMessage turns a claimed row into the message to emit, its delivery in d (nil:
// a new one). The payload is copied unless owned says the record's buffers are the
// caller's to keep (the store may reuse them otherwise). An error means the headers
// cannot be decoded.
func (f *Forwarder) buildMessage(rec *outbox.Record, owned bool, d *delivery) (*message.Message, *delivery, error) {
	payload := rec.Body
	if !owned {
		payload = make([]byte, len(rec.Body))
		copy(payload, rec.Body)
	}
	msg := message.NewMessage(rec.MessageUUID, payload)
	if err := headercodec.DecodeMetadataInto(msg.Metadata, rec.Headers); err != nil {
		return nil, nil, fmt.Errorf("forwarder: row %s: corrupt headers: %w", rec.ID, err)
	}
	if d == nil {
		d = new(delivery)
	}
	d.row = Row{
		ID: rec.ID, Lane: rec.Lane, OrderingKey: rec.OrderingKey, Transport: rec.Transport,
		Destination: rec.Destination, MessageType: rec.MessageType, TenantID: rec.TenantID,
		Attempts: rec.Attempts, CreatedAt: rec.CreatedAt, DeliverAt: rec.DeliverAt,
	}
	d.mark.guard = &f.acks
	d.mark.sent.Store(false)
	d.mark.overridden.Store(false)
	// The row travels as outbox.ContextWithForwarded, which publisher.Middleware
	// recognises (it opens no transaction for a forwarded message). A message Run hands
	// to the target itself gets the target's context first (toTarget).
	msg.SetContext(outbox.ContextWithForwarded(f.baseCtx, d))
	return msg, d, nil
}

// Handler returns the router handler that republishes a message emitted by this
// forwarder to the publisher of its row's transport, under its destination topic, as a
// copy with the original UUID, metadata and payload and the message's context.
//
// Once Handler has been made, an ack deletes a row only when Handler (or Run) published
// its message: a router middleware that acks a message whose publish failed
// (PoisonQueue, one that returns nil for the handler's error) or that acks without
// calling the handler makes the row a failed send, as a nack would (backoff, attempts,
// parking after MaxAttempts), and the forwarder logs once which of the two it saw.
func (f *Forwarder) Handler() message.NoPublishHandlerFunc {
	f.acks.handlerIsMade(f.logger)
	return func(msg *message.Message) error {
		d := deliveryFrom(msg.Context())
		if d == nil {
			return errors.New("forwarder: message has no outbox row in its context (not emitted by a Forwarder)")
		}
		pub, ok := f.targets[d.row.Transport]
		if !ok {
			return fmt.Errorf("forwarder: unknown transport %q", d.row.Transport)
		}
		out := msg.Copy()
		out.SetContext(targetContext(msg.Context(), d))
		returned, err := f.publish(pub, d.row.Destination, []*message.Message{out})
		if !returned {
			return errAbandoned // not deleted: the row is sent again
		}
		if err != nil {
			s := err.Error()
			d.err.Store(&s)
			return fmt.Errorf("forwarder: publish to %q (transport %q): %w", d.row.Destination, d.row.Transport, err)
		}
		d.mark.sent.Store(true)
		return nil
	}
}

// publish calls pub.Publish in a goroutine of its own and waits for it until the
// forwarder abandons its messages at the shutdown deadline: a call that never returns
// (a broker client without a timeout) then keeps only its goroutine, and Close (and a
// router's handler) returns in time. returned is false then; the rows were not deleted
// and are sent again later (at least once). msgs must not be reused after an abandoned
// call.
func (f *Forwarder) publish(pub message.Publisher, topic string, msgs []*message.Message) (returned bool, err error) {
	select {
	case <-f.abandon: // no new call once the forwarder has given its messages up
		return false, nil
	default:
	}
	done := make(chan error, 1)
	go func() { done <- pub.Publish(topic, msgs...) }()
	select {
	case err := <-done:
		return true, err
	case <-f.abandon:
		return false, nil
	}
}

// AddToRouter adds the forwarder's handler to r under Config.HandlerName, subscribed to
// this forwarder, and a plugin that checks the table's lanes before the router starts
// its handlers: lanes out of range make the router's Run fail at once. A database that
// cannot be reached does not; the router then subscribes, and Subscribe retries the
// check with backoff under the router's context, so that cancelling it ends the wait
// (a plugin is given no context). Router middleware applies to the handler as to any
// other.
func (f *Forwarder) AddToRouter(r *message.Router) (*message.Handler, error) {
	if r == nil {
		return nil, errors.New("forwarder: router is nil")
	}
	if _, dup := r.Handlers()[f.cfg.HandlerName]; dup {
		return nil, fmt.Errorf("forwarder: router already has a handler named %q (set Config.HandlerName)", f.cfg.HandlerName)
	}
	r.AddPlugin(f.routerStartupCheck)
	return r.AddConsumerHandler(f.cfg.HandlerName, f.opts.OutboxTable(), f, f.Handler()), nil
}

// routerStartupCheck is AddToRouter's plugin: one CheckLanes, bounded by
// routerCheckTimeout; only lanes out of range stop the router.
func (f *Forwarder) routerStartupCheck(*message.Router) error {
	ctx, cancel := context.WithTimeout(context.Background(), routerCheckTimeout)
	defer cancel()
	err := f.CheckLanes(ctx)
	if err != nil && !errors.Is(err, outbox.ErrLaneOutOfRange) {
		f.logger.Error("Cannot check the outbox table's lanes before the router starts; the subscription retries", err, nil)
		return nil
	}
	return err
}

// Run forwards until ctx is cancelled, without a router, publishing to the targets
// itself as the Handler would: a lane worker publishes consecutive rows of its run with
// one transport and topic in one Publish call (Watermill's publishers send them in
// order), and a locked batch of unordered rows goes out as the package doc's "Unordered
// rows" describes (calls of up to four messages, in line while the target answers at
// once, then one message per call, concurrently); a failed call is published again one
// message at a time, so that the failure lands on the row that causes it. Messages of
// token claims (TokenClaims) are handled each in a goroutine of its own, acked or
// nacked as a router would. With no middleware to apply that is all a router would do
// here, and it saves the router's cost per message (BenchmarkDrain's fwdlocked_router
// figures); use AddToRouter for middleware (there, one message per handler call). Run
// returns once Close has finished, with its error, or at once with the subscription's
// error (lanes out of range, closed).
func (f *Forwarder) Run(ctx context.Context) error {
	f.mu.Lock()
	f.direct = !f.subscribed
	f.mu.Unlock()
	msgs, err := f.Subscribe(ctx, f.opts.OutboxTable())
	if err != nil {
		return err
	}
	handle := f.Handler()
	var handlers sync.WaitGroup
	for msg := range msgs {
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			if err := handle(msg); err != nil {
				f.logger.Error("Forwarding a message failed; it is retried after backoff", err,
					watermill.LogFields{"message_uuid": msg.UUID})
				msg.Nack()
				return
			}
			msg.Ack()
		}()
	}
	// The subscription ends when Close has settled or abandoned every message in flight;
	// a handler still running past the shutdown deadline (a publisher that hangs) is not
	// waited for, as a router's close timeout would not.
	done := make(chan struct{})
	go func() {
		handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-f.abandon:
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			f.logger.Error("Handlers still running after the shutdown deadline (a publisher does not return)", nil, nil)
		}
	}
	return f.Close()
}

func (d *delivery) failure() string {
	if p := d.err.Load(); p != nil {
		return *p
	}
	if d.mark.overridden.Load() {
		return overriddenReason
	}
	return "forwarder: message nacked by the handler"
}

func (f *Forwarder) now() time.Time { return f.cfg.Now() }

// mono is the forwarder's monotonic clock (time since New), which lease deadlines use:
// unlike Config.Now it neither jumps nor is skewed.
func (f *Forwarder) mono() time.Duration { return time.Since(f.epoch) }

// sleep waits d or until one of the channels fires; it reports false when stop fired.
func sleep(d time.Duration, stop <-chan struct{}, wakeCh <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wakeCh:
	case <-stop:
		return false
	}
	return true
}
