package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// InboxKeyMaxBytes bounds a consumer name and a message UUID in the inbox table (UTF-8
// bytes). Both are compared byte for byte on every engine (no case folding, no padding),
// as Go compares strings.
const InboxKeyMaxBytes = 400

// Inbox is the optional capability of a Store that keeps the inbox table
// (Options.InboxTable): the message UUIDs each consumer has applied. Package inbox builds
// its router middleware and retention cleaner on it; the three dialects implement it and
// package outboxtest holds its rules.
//
// Rules common to every method: instants are supplied by the caller and stored in UTC
// at microsecond precision or better; database errors propagate (transient ones wrapped
// in *RetryableError).
type Inbox interface {
	// RecordInbox inserts (consumer, messageUUID) at processedAt inside the caller's
	// transaction and reports whether it is new (first). When another transaction has
	// recorded the same pair and not finished, the call waits for it: after its commit it
	// reports false (a duplicate), after its rollback it records the pair and reports
	// true. A duplicate adds one to the entry's count of duplicates (in tx: the count
	// stands only if tx commits; InboxConsumerStats.Duplicates) and leaves the
	// transaction usable; it locks the entry until tx ends, so concurrent duplicates of
	// one message wait for each other (and, under PostgreSQL's REPEATABLE READ or
	// SERIALIZABLE or SQL Server's SNAPSHOT isolation, the later one fails with a
	// serialization error, a RetryableError), and a transaction that records several
	// known keys in another order than a concurrent one may deadlock. An empty,
	// non-UTF-8, NUL-holding or too long (InboxKeyMaxBytes) consumer or UUID is an error
	// wrapping ErrInvalidRecord; nothing is written. An inbox table created before the
	// duplicates column gives an error wrapping ErrSchemaOutdated that names the ALTER.
	RecordInbox(ctx context.Context, tx *sql.Tx, consumer, messageUUID string, processedAt time.Time) (first bool, err error)

	// PruneInbox deletes up to limit entries processed before before, oldest first, in
	// autocommit, and returns how many it deleted.
	PruneInbox(ctx context.Context, before time.Time, limit int) (int, error)

	// InboxStats returns per consumer the number of entries, the oldest processedAt and
	// the duplicates the entries skipped, ordered by consumer (bytewise); an error
	// wrapping ErrSchemaOutdated for a table without the duplicates column. Its reads
	// are bounded whatever the table's size: it walks at most InboxStatsMaxConsumers
	// consumers (one index dive each) and reads at most InboxStatsMaxEntries entries of
	// each; a consumer with more is Capped, and the table's size is then the engine's
	// estimate (InboxStats.EstimatedEntries).
	InboxStats(ctx context.Context) (InboxStats, error)

	// AcquireInboxLease takes the table's retention lease (one row in
	// Options.InboxLeaseTable) for l.Token until l.Until when it is free, expired at
	// l.Now, or already held by l.Token (then it is extended, never shortened). It
	// reports whether the caller holds it.
	AcquireInboxLease(ctx context.Context, l InboxLeaseParams) (bool, error)
	// ReleaseInboxLease gives the retention lease up when token holds it (live or not).
	ReleaseInboxLease(ctx context.Context, token Token) (bool, error)
}

// InboxLeaseParams parameterises Inbox.AcquireInboxLease.
type InboxLeaseParams struct {
	Owner string // free text naming the holder, for operators
	Token Token
	Now   time.Time
	Until time.Time
}

// InboxStatsMaxConsumers bounds the consumers Inbox.InboxStats lists.
const InboxStatsMaxConsumers = 100

// InboxStatsMaxEntries bounds the entries Inbox.InboxStats reads per consumer: a
// consumer with more is Capped.
const InboxStatsMaxEntries = 10_000

// InboxConsumerStats is the size of one consumer's part of the inbox table.
type InboxConsumerStats struct {
	Consumer string
	// Entries is the consumer's number of entries; when Capped, a lower bound
	// (InboxStatsMaxEntries + 1).
	Entries int64
	// Oldest is processedAt of its oldest entry; zero when Capped (InboxStats.Oldest
	// is the table's).
	Oldest time.Time
	// Duplicates is how many deliveries of its entries' messages were skipped as
	// already applied (committed duplicates, summed over the entries the table keeps:
	// an entry pruned by retention takes its count with it); when Capped, over the
	// entries read only (a lower bound).
	Duplicates int64
	// Capped is set when the consumer holds more than InboxStatsMaxEntries entries, which
	// were not all read.
	Capped bool
}

// InboxStats is a snapshot of the inbox table, taken with bounded reads.
type InboxStats struct {
	Consumers []InboxConsumerStats // ordered by consumer; at most InboxStatsMaxConsumers
	// MoreConsumers is set when the table holds consumers after the last one listed.
	MoreConsumers bool
	// Oldest is processedAt of the table's oldest entry (zero for an empty table).
	Oldest time.Time
	// EstimatedEntries is the engine's estimate of the table's rows (its statistics),
	// read only when a consumer is Capped or MoreConsumers is set; 0 otherwise.
	EstimatedEntries int64
}

// Partial reports whether the figures leave entries uncounted (a Capped consumer, or
// more consumers than listed): Entries and Duplicates are lower bounds then.
func (s InboxStats) Partial() bool {
	if s.MoreConsumers {
		return true
	}
	for _, c := range s.Consumers {
		if c.Capped {
			return true
		}
	}
	return false
}

// Entries returns the table's total number of entries, exact unless Partial; then the
// greater of the entries counted and EstimatedEntries.
func (s InboxStats) Entries() int64 {
	var n int64
	for _, c := range s.Consumers {
		n += c.Entries
	}
	if s.Partial() {
		n = max(n, s.EstimatedEntries)
	}
	return n
}

// Duplicates returns the table's total of skipped duplicates (see
// InboxConsumerStats.Duplicates).
func (s InboxStats) Duplicates() int64 {
	var n int64
	for _, c := range s.Consumers {
		n += c.Duplicates
	}
	return n
}

// CheckInboxKey validates a consumer name or message UUID for the inbox table; the error
// wraps ErrInvalidRecord and names field. Dialects call it before any I/O.
func CheckInboxKey(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: inbox %s is empty", ErrInvalidRecord, field)
	case len(s) > InboxKeyMaxBytes:
		return fmt.Errorf("%w: inbox %s is %d bytes; at most %d are stored", ErrInvalidRecord, field, len(s), InboxKeyMaxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: inbox %s is not valid UTF-8", ErrInvalidRecord, field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: inbox %s contains a NUL character", ErrInvalidRecord, field)
	}
	return nil
}

// CheckInboxEntry validates an inbox entry's consumer name and message UUID
// (CheckInboxKey of each); dialects call it before any I/O.
func CheckInboxEntry(consumer, messageUUID string) error {
	if err := CheckInboxKey("consumer", consumer); err != nil {
		return err
	}
	return CheckInboxKey("message UUID", messageUUID)
}

// CheckInboxLease validates l; dialects call it before any I/O.
func CheckInboxLease(l InboxLeaseParams) error {
	switch {
	case l.Token.IsZero():
		return fmt.Errorf("inbox lease: zero token")
	case !l.Until.After(l.Now):
		return fmt.Errorf("inbox lease: until %s is not after now %s", l.Until, l.Now)
	case !utf8.ValidString(l.Owner) || strings.IndexByte(l.Owner, 0) >= 0 || len(l.Owner) > 255:
		return fmt.Errorf("inbox lease: owner must be valid UTF-8 without NUL, at most 255 bytes")
	}
	return nil
}

// InboxBeginner is the optional capability of an Inbox store that begins a transaction
// with an inbox record as its first statement, and sends that record in the round trip
// of the BEGIN itself when db was opened through the dialect's connector
// (postgres.WrapConnector or postgres.OpenDB; mysql.NewConnector or mysql.OpenDB). On
// any other pool it begins, then records, as BeginRecordInbox does for a store without
// the capability. package inbox's Inbox.OutboxMiddleware begins every handler
// transaction through it.
type InboxBeginner interface {
	// BeginRecordInbox begins a transaction on db with opts and records (consumer,
	// messageUUID) at processedAt in it, with RecordInbox's rules. On an error no
	// transaction is left open (it was rolled back, or never begun); an invalid key is
	// an error wrapping ErrInvalidRecord before any I/O.
	BeginRecordInbox(ctx context.Context, db *sql.DB, opts *sql.TxOptions, consumer, messageUUID string, processedAt time.Time) (tx *sql.Tx, first bool, err error)
}

// BeginRecordInbox begins a transaction on db with opts and records (consumer,
// messageUUID) in it as its first statement: through store's InboxBeginner when it has
// one (one round trip on a pool of the dialect's connector), else db.BeginTx then
// RecordInbox. On an error no transaction is left open.
func BeginRecordInbox(ctx context.Context, store Inbox, db *sql.DB, opts *sql.TxOptions, consumer, messageUUID string, processedAt time.Time) (*sql.Tx, bool, error) {
	if b, ok := store.(InboxBeginner); ok {
		return b.BeginRecordInbox(ctx, db, opts, consumer, messageUUID, processedAt)
	}
	if err := CheckInboxEntry(consumer, messageUUID); err != nil {
		return nil, false, err
	}
	if db == nil {
		return nil, false, fmt.Errorf("%w: begin and record inbox: db is nil", ErrInvalidArgument)
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, false, fmt.Errorf("begin: %w", err)
	}
	first, err := store.RecordInbox(ctx, tx, consumer, messageUUID, processedAt)
	if err != nil {
		_ = tx.Rollback()
		return nil, false, err
	}
	return tx, first, nil
}
