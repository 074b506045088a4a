package outbox

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidOptions wraps every validation error of Options and of a dialect's own
	// options; the message names the field.
	ErrInvalidOptions = errors.New("outbox: invalid options")

	// ErrUnknownOutcome is wrapped by a commit error whose outcome is unknown (for example
	// the connection was lost during COMMIT): the transaction may or may not have been
	// committed. Retry the whole unit with application-level idempotency.
	ErrUnknownOutcome = errors.New("outbox: commit outcome unknown")

	// ErrClosed is returned by a component used after Close.
	ErrClosed = errors.New("outbox: closed")

	// ErrTxDone is returned when a transaction-bound outbox is used after Commit or
	// Rollback, or after the application completed its *sql.Tx directly.
	ErrTxDone = errors.New("outbox: transaction already completed")

	// ErrLaneOutOfRange is returned when the table holds lane values that the configured
	// lane count cannot own (writers and forwarders disagree on Lanes).
	ErrLaneOutOfRange = errors.New("outbox: lane out of range")

	// ErrNotifierMismatch is returned when a notifier serving another outbox table is
	// linked to a publisher.
	ErrNotifierMismatch = errors.New("outbox: notifier serves another outbox table")

	// ErrInvalidArgument is wrapped by a store's error for a call whose parameters the
	// contract forbids (a limit below 1, a zero token, Until not after Now, a lane out of
	// range, ...); the message names the method and the parameter, and nothing was done.
	// The checks are the parameter types' Validate methods, shared by every dialect.
	ErrInvalidArgument = errors.New("outbox: invalid argument")

	// ErrInvalidRecord is wrapped by insert errors for a record that cannot be stored
	// (zero id, lane out of range, ...); nothing of the batch is written.
	ErrInvalidRecord = errors.New("outbox: invalid record")

	// ErrNoTransaction is returned by a publisher that publishes into the outbox
	// transaction of each message's context (publisher's ContextPublisher) for a message
	// whose context carries none; nothing of that Publish call is written.
	ErrNoTransaction = errors.New("outbox: no outbox transaction in the message context")

	// ErrNotFlushed is wrapped by an attached outbox transaction's NotifyCommitted
	// (publisher's Tx) when messages were published into it after its last Flush: they
	// are not in the application's committed transaction. The error counts them.
	ErrNotFlushed = errors.New("outbox: messages published into an attached transaction were never flushed")

	// ErrWakeUnavailable is wrapped by the error of a WakeSource that cannot deliver
	// wake-ups at all (LISTEN refused or never delivering, as through a transaction-mode
	// pooler; a wake-up subscription that fails): the forwarder then polls.
	ErrWakeUnavailable = errors.New("outbox: wake-ups unavailable")

	// ErrUnhealthy is wrapped by a forwarder's health check error when the oldest
	// eligible row has waited longer than the threshold.
	ErrUnhealthy = errors.New("outbox: unhealthy")

	// ErrFindUnsupported is returned by Find for a store without the Finder capability.
	ErrFindUnsupported = errors.New("outbox: the store cannot find messages (no Finder)")

	// ErrFindNeedsIndex is returned by a Finder asked for a message UUID without a time
	// window on a table without an index on message_uuid: the lookup would read the
	// whole table. Add the index (the dialect's FindIndexScript) or give a window.
	ErrFindNeedsIndex = errors.New("outbox: finding by message UUID without a time window needs the message_uuid index")
)

// RetryableError marks a transient database error (deadlock, lock wait timeout,
// serialization failure): the same operation may succeed when tried again.
type RetryableError struct {
	Err error
}

func (e *RetryableError) Error() string { return "outbox: retryable: " + e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// IsRetryable reports whether err (or an error it wraps) is a transient database error
// that a dialect translated into a *RetryableError.
func IsRetryable(err error) bool {
	var r *RetryableError
	return errors.As(err, &r)
}

// CorruptRowError identifies a stored row that cannot be decoded. Stores set it on
// Record.Corrupt so that a forwarder can park exactly that row and go on.
type CorruptRowError struct {
	ID     ID
	Column string
	Err    error
}

func (e *CorruptRowError) Error() string {
	return fmt.Sprintf("outbox: row %s: corrupt %s: %v", e.ID, e.Column, e.Err)
}
func (e *CorruptRowError) Unwrap() error { return e.Err }

// invalidOption builds an ErrInvalidOptions error naming the field.
func invalidOption(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...))
}

// InvalidOption returns an error wrapping ErrInvalidOptions that names the field; dialects
// use it so that every option error reads the same.
func InvalidOption(field, format string, args ...any) error {
	return invalidOption(field, format, args...)
}

// Errors of package inbox, here beside the others so that every sentinel of the module
// is errors.Is-able from one place.
var (
	// ErrNoMessageUUID is returned by the inbox middleware for a message without a
	// UUID: it cannot be deduplicated, so it is not processed (the router nacks it).
	ErrNoMessageUUID = errors.New("outbox: inbox: message has no UUID")

	// ErrNoTx is returned by the inbox middleware when the message context carries no
	// outbox transaction (publisher's Middleware must run around it).
	ErrNoTx = errors.New("outbox: inbox: no outbox transaction in the message context")

	// ErrSchemaMissing is wrapped by a store's error when a table of the outbox does not
	// exist (MySQL 1146, PostgreSQL 42P01 or 3F000 for its schema, SQL Server 208, translated at each
	// dialect's edge): the publisher's commit, the forwarder's startup check and the
	// inbox's record return it. The error names the tables and what to run.
	ErrSchemaMissing = errors.New("outbox: table does not exist")

	// ErrSchemaOutdated: a table was created by an older version of the schema and lacks
	// a column this version uses; the error names the ALTER that adds it (CHANGELOG
	// lists them). CreateSchema never alters an existing table.
	ErrSchemaOutdated = errors.New("outbox: table predates the current schema")
)

// SchemaOutdated wraps a driver error that shows a table lacks a column (the dialects
// recognise it) in ErrSchemaOutdated, naming alter, the statement that adds it.
func SchemaOutdated(err error, alter string) error {
	return fmt.Errorf("%w: %w (add the missing column: %s)", ErrSchemaOutdated, err, alter)
}

// SchemaMissing wraps err, a driver's "no such table" for a table of the outbox opts
// names, in ErrSchemaMissing, with the fix: the tables, store.CreateSchema, the
// outboxctl command with this schema and prefix, and the dialect's CreateScript.
// dialect is "mysql", "postgres" or "sqlserver".
func SchemaMissing(err error, dialect string, opts Options) error {
	flags := ""
	if opts.Schema != "" {
		flags = fmt.Sprintf(" -schema %q", opts.Schema)
	}
	return fmt.Errorf("%w (%w); create the outbox tables (%s): call store.CreateSchema(ctx) at startup, "+
		"or run `outboxctl schema apply -dialect %s%s -prefix %q -dsn ...`, or apply %s.CreateScript(options) in your migrations",
		ErrSchemaMissing, err, strings.Join(opts.TableNames(), ", "), dialect, flags, opts.TablePrefix, dialect)
}
