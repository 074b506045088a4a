package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/wake"
)

// Defaults of NotifierConfig and ListenerConfig.
const (
	NotifyIntervalDefault    = 5 * time.Millisecond
	NotifyMaxIntervalDefault = 50 * time.Millisecond
	NotifyTimeoutDefault     = 5 * time.Second
	ProbeTimeoutDefault      = 2 * time.Second
	PingIntervalDefault      = 30 * time.Second
	ReconnectMinDefault      = 100 * time.Millisecond
	ReconnectMaxDefault      = 5 * time.Second
	maxChannelBytes          = MaxIdentifierBytes
	channelHashHex           = 16
	channelPrefix            = "outbox:"
	channelTruncatedMaxBytes = maxChannelBytes - channelHashHex - 1
)

// Channel returns the notification channel of the table opts names:
// "outbox:<schema>.<prefix>outbox" (without "<schema>." when Schema is empty). A name
// longer than PostgreSQL's 63-byte identifier limit is cut (at a character boundary)
// and ends with "~" and 16 hex digits of its SHA-256, so that distinct tables keep
// distinct channels.
func Channel(opts outbox.Options) string {
	name := channelPrefix + opts.OutboxTable()
	if opts.Schema != "" {
		name = channelPrefix + opts.Schema + "." + opts.OutboxTable()
	}
	if len(name) <= maxChannelBytes {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	cut := channelTruncatedMaxBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "~" + hex.EncodeToString(sum[:])[:channelHashHex]
}

// NotifierConfig configures a Notifier. Zero fields take their defaults.
type NotifierConfig struct {
	// Interval is the shortest time between two notifications: the first commit after a
	// quiet Interval is notified at once, later ones are merged into one notification
	// per Interval. Defaults to NotifyIntervalDefault.
	Interval time.Duration
	// MaxInterval bounds the spacing during a burst: while each Interval gathers several
	// commits (wake.BurstCommits, 4) the spacing doubles up to MaxInterval (the
	// forwarders are busy then, and each notification costs a statement), and it drops
	// back to Interval as soon as commits come one at a time. Defaults to
	// NotifyMaxIntervalDefault; equal to Interval, the spacing is fixed.
	MaxInterval time.Duration
	// Timeout bounds one pg_notify statement. Defaults to NotifyTimeoutDefault.
	Timeout time.Duration
}

func (c *NotifierConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = NotifyIntervalDefault
	}
	if c.MaxInterval == 0 {
		c.MaxInterval = max(NotifyMaxIntervalDefault, c.Interval)
	}
	if c.Timeout == 0 {
		c.Timeout = NotifyTimeoutDefault
	}
}

// Validate checks c after defaults; errors wrap outbox.ErrInvalidOptions.
func (c NotifierConfig) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, outbox.InvalidOption("postgres.NotifierConfig.Interval", "must not be negative, got %s", c.Interval))
	}
	if c.MaxInterval < c.Interval {
		errs = append(errs, outbox.InvalidOption("postgres.NotifierConfig.MaxInterval", "must not be below Interval (%s), got %s", c.Interval, c.MaxInterval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, outbox.InvalidOption("postgres.NotifierConfig.Timeout", "must be positive, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// Notifier is the publisher side of LISTEN/NOTIFY: an outbox.Notifier (link it to the
// publisher, next to the in-process forwarder: publisher.Config.Notifiers) that raises
// a notification on the table's Channel after each commit, carrying the committed lanes
// ("u" for unordered rows). Commits are coalesced: at most one pg_notify statement per
// Interval (up to MaxInterval apart during a burst), run in autocommit on the pool
// after the application's commit returned, so it adds no statement to the committing
// transaction and does not take PostgreSQL's global NOTIFY commit lock inside it (that
// lock serialises the commits of notifying transactions, fsync included). A notification that fails or is lost (the process
// dies right after the commit) only delays the rows until the forwarder's next poll.
type Notifier struct {
	db      *sql.DB
	opts    outbox.Options
	channel string
	c       *wake.Coalescer
}

var _ outbox.Notifier = (*Notifier)(nil)

// NewNotifier starts a Notifier for the table opts names, sending through db (the
// application's pool, opened with pgx/stdlib). A nil logger logs nothing. Close it
// after the last commit.
func NewNotifier(db *sql.DB, opts outbox.Options, config NotifierConfig, logger watermill.LoggerAdapter) (*Notifier, error) {
	if db == nil {
		return nil, errors.New("postgres: NewNotifier: db is nil")
	}
	opts, err := validateOptions(opts)
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
	n := &Notifier{db: db, opts: opts, channel: Channel(opts)}
	logger = logger.With(watermill.LogFields{"outbox_table": opts.OutboxTable(), "channel": n.channel})
	n.c = wake.NewCoalescer(n.send, config.Interval, config.MaxInterval, config.Timeout, logger)
	return n, nil
}

// NotifierOptions implements outbox.Notifier.
func (n *Notifier) NotifierOptions() outbox.Options { return n.opts }

// Notify implements outbox.Notifier: it merges c into the next notification and never
// blocks.
func (n *Notifier) Notify(c outbox.Commit) { n.c.Add(c) }

// Close sends the pending notification and stops. It is idempotent.
func (n *Notifier) Close() error { return n.c.Close() }

// notifyStatement raises the notification in a transaction of its own that does not
// wait for its commit record to reach the disk: a notification is delivered at commit,
// and losing one in a crash costs a poll, so waiting for the flush would only delay it
// (and queue behind the writers' flushes).
const notifyStatement = "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)"

func (n *Notifier) send(ctx context.Context, payload []byte) error {
	_, err := n.db.ExecContext(ctx, notifyStatement, n.channel, string(payload))
	return wrap("notify", err)
}
