package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/wake"
)

// ListenerConfig configures a Listener. Zero fields take their defaults.
type ListenerConfig struct {
	// ProbeTimeout is how long a fresh listening connection waits for its probe (a
	// notification sent from a second connection) before it concludes that LISTEN does
	// not work through this connection. Defaults to ProbeTimeoutDefault.
	ProbeTimeout time.Duration
	// PingInterval is how long the connection may stay silent before it is checked with
	// a ping (a connection lost without a reset is found then). Defaults to
	// PingIntervalDefault.
	PingInterval time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff between reconnection
	// attempts. Default to ReconnectMinDefault and ReconnectMaxDefault.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
}

func (c *ListenerConfig) setDefaults() {
	for _, f := range []struct {
		p *time.Duration
		d time.Duration
	}{{&c.ProbeTimeout, ProbeTimeoutDefault}, {&c.PingInterval, PingIntervalDefault},
		{&c.ReconnectMin, ReconnectMinDefault}, {&c.ReconnectMax, ReconnectMaxDefault}} {
		if *f.p == 0 {
			*f.p = f.d
		}
	}
}

// Validate checks c after defaults; errors wrap outbox.ErrInvalidOptions.
func (c ListenerConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ProbeTimeout", c.ProbeTimeout}, {"PingInterval", c.PingInterval},
		{"ReconnectMin", c.ReconnectMin}, {"ReconnectMax", c.ReconnectMax}} {
		if f.d <= 0 {
			errs = append(errs, outbox.InvalidOption("postgres.ListenerConfig."+f.name, "must be positive, got %s", f.d))
		}
	}
	if c.ReconnectMax < c.ReconnectMin {
		errs = append(errs, outbox.InvalidOption("postgres.ListenerConfig.ReconnectMax",
			"must not be below ReconnectMin (%s), got %s", c.ReconnectMin, c.ReconnectMax))
	}
	return errors.Join(errs...)
}

// Listener is the forwarder side of LISTEN/NOTIFY, an outbox.WakeSource: set it as the
// forwarder's Config.Wake. It holds one dedicated connection (not from the pool) that
// LISTENs on the table's Channel and hands each notification to the forwarder, which
// wakes the workers of the notified lanes and the unordered claimers at once.
//
// A fresh connection proves that notifications arrive (a probe sent from a second,
// short-lived connection) before it is trusted. A connection that drops is reconnected
// with backoff; after a reconnection every lane is woken once, for the commits missed
// meanwhile. When LISTEN is refused, or the probe never arrives (a transaction-mode
// pooler such as PgBouncer hands the LISTEN to a server connection that is not ours a
// moment later), Listen returns an error wrapping outbox.ErrWakeUnavailable that says
// why; the forwarder logs it and finds other processes' commits by polling, as without
// a Listener. That holds for the first connection only: once a connection has listened,
// a refused LISTEN or a missing probe (a failover's recovery, a slow probe) is retried
// with backoff like a lost connection, the forwarder polling meanwhile.
type Listener struct {
	conn    *pgx.ConnConfig
	opts    outbox.Options
	channel string
	cfg     ListenerConfig
	logger  watermill.LoggerAdapter
	all     outbox.Commit
}

var _ outbox.WakeSource = (*Listener)(nil)

// NewListener returns a Listener for the table opts names that connects with connString
// (a pgx URL or keyword DSN: the server itself or a session-mode pooler, not a
// transaction-mode one). A nil logger logs nothing. It does no I/O.
func NewListener(connString string, opts outbox.Options, config ListenerConfig, logger watermill.LoggerAdapter) (*Listener, error) {
	connConfig, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: NewListener: connString: %w", outbox.ErrInvalidOptions, err)
	}
	opts, err = validateOptions(opts)
	if err != nil {
		return nil, err
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	l := &Listener{conn: connConfig, opts: opts, channel: Channel(opts), cfg: config, all: wake.All(opts.Lanes)}
	l.logger = logger.With(watermill.LogFields{"outbox_table": opts.OutboxTable(), "channel": l.channel})
	return l, nil
}

// Channel returns the channel the Listener listens on.
func (l *Listener) Channel() string { return l.channel }

// Listen implements outbox.WakeSource: it listens until ctx ends (then it returns nil),
// reconnecting after failures, or until wake-ups prove impossible (an error wrapping
// outbox.ErrWakeUnavailable). Only the first connection can prove that: once one has
// listened, LISTEN refused or a probe that does not arrive (a failover's recovery, one
// slow probe) is a transient failure like a lost connection, retried with backoff.
func (l *Listener) Listen(ctx context.Context, n outbox.Notifier) error {
	backoff := l.cfg.ReconnectMin
	worked := false    // a connection has listened: every later failure is transient
	reconnect := false // wake everything once a lost connection is back
	logged := ""       // the failure of the current outage last logged
	for {
		listened, err := l.session(ctx, n, reconnect)
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			backoff, reconnect, worked, logged = l.cfg.ReconnectMin, true, true, ""
		}
		if errors.Is(err, outbox.ErrWakeUnavailable) && !worked {
			return err // the forwarder logs it once, and polls
		}
		if err != nil && err.Error() != logged { // once per outage and cause, not per attempt
			l.logger.Error("Listening connection failed; reconnecting with backoff (the forwarder polls meanwhile)", err, nil)
			logged = err.Error()
		}
		if !sleepCtx(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, l.cfg.ReconnectMax)
	}
}

// session connects, LISTENs, proves delivery and delivers notifications until the
// connection fails or ctx ends; listened reports whether it got that far.
func (l *Listener) session(ctx context.Context, n outbox.Notifier, reconnect bool) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, l.conn.Copy())
	if err != nil {
		return false, fmt.Errorf("postgres: listen: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(l.channel)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return false, fmt.Errorf("%w: postgres: LISTEN refused: %w", outbox.ErrWakeUnavailable, err)
		}
		return false, fmt.Errorf("postgres: listen: %w", err)
	}
	if err := l.probe(ctx, conn, n); err != nil {
		return false, err
	}
	if reconnect {
		n.Notify(l.all)
	}
	l.logger.Info("Listening for commit notifications", watermill.LogFields{"reconnect": reconnect})
	return true, l.deliver(ctx, conn, n)
}

// deliver hands notifications to n until the connection fails or ctx ends; a silent
// connection is pinged every PingInterval.
func (l *Listener) deliver(ctx context.Context, conn *pgx.Conn, n outbox.Notifier) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.PingInterval)
		nt, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.notify(nt, n)
			continue
		case ctx.Err() != nil:
			return nil
		case !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed():
			return fmt.Errorf("postgres: listen: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("postgres: listen: ping: %w", err)
		}
	}
}

func (l *Listener) notify(nt *pgconn.Notification, n outbox.Notifier) {
	if nt.Channel != l.channel || isProbe(nt.Payload) {
		return
	}
	n.Notify(wake.Decode(nt.Payload, l.opts.Lanes))
}

const probePrefix = "probe:"

func isProbe(p string) bool { return len(p) > len(probePrefix) && p[:len(probePrefix)] == probePrefix }

// probe sends a notification from a second connection and waits for it on conn;
// notifications that arrive meanwhile are delivered. A probe that does not arrive
// within ProbeTimeout on a live connection means LISTEN cannot work here.
func (l *Listener) probe(ctx context.Context, conn *pgx.Conn, n outbox.Notifier) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	payload := probePrefix + hex.EncodeToString(b[:])
	if err := l.sendProbe(ctx, payload); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeTimeout)
	defer cancel()
	for {
		nt, err := conn.WaitForNotification(pctx)
		switch {
		case err == nil && nt.Payload == payload:
			return nil
		case err == nil:
			l.notify(nt, n)
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			return fmt.Errorf("%w: postgres: LISTEN on %q received no probe notification within %s (a transaction-mode pooler such as PgBouncer?)",
				outbox.ErrWakeUnavailable, l.channel, l.cfg.ProbeTimeout)
		default:
			return fmt.Errorf("postgres: listen: waiting for the probe: %w", err)
		}
	}
}

func (l *Listener) sendProbe(ctx context.Context, payload string) error {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.ProbeTimeout)
	defer cancel()
	c, err := pgx.ConnectConfig(cctx, l.conn.Copy())
	if err != nil {
		return fmt.Errorf("postgres: listen: probe: connect: %w", err)
	}
	defer c.Close(cctx) //nolint:errcheck // a failed close loses nothing
	if _, err := c.Exec(cctx, "SELECT pg_notify($1, $2)", l.channel, payload); err != nil {
		return fmt.Errorf("postgres: listen: probe: %w", err)
	}
	return nil
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
