package sqlserver

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	mssql "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
)

// SQL Server error numbers the store treats as transient.
const (
	errDeadlock    = 1205 // chosen as deadlock victim; the statement was rolled back
	errLockTimeout = 1222 // lock request time out period exceeded (SET LOCK_TIMEOUT)
	// Snapshot isolation transaction aborted due to update conflict. The store's own
	// statements never run under SNAPSHOT, but Insert runs in the caller's transaction,
	// which may; the whole unit may succeed when run again.
	errSnapshotConflict = 3960

	// INSERT/UPDATE/DELETE failed because SET options have incorrect settings: a
	// session, procedure or trigger writing the table runs without the options its
	// filtered indexes need.
	errSetOptions = 1934

	errUniqueConstraint = 2627 // violation of a PRIMARY KEY or UNIQUE constraint
	errUniqueIndex      = 2601 // duplicate key row in a unique index
	errInvalidColumn    = 207  // invalid column name
	errInvalidObject    = 208  // invalid object name: the table (or its schema) does not exist
)

// inboxSchemaHint names the fix when the inbox table predates its duplicates column
// (error 207, invalid column name).
func inboxSchemaHint(err error, table string) error {
	if e, ok := serverError(err); ok && hasNumber(e, errInvalidColumn) && strings.Contains(e.Message, "duplicates") {
		return outbox.SchemaOutdated(err, "ALTER TABLE "+table+" ADD duplicates bigint NOT NULL DEFAULT 0")
	}
	return err
}

// isDuplicateKey reports a unique key violation.
func isDuplicateKey(err error) bool {
	e, ok := serverError(err)
	return ok && (hasNumber(e, errUniqueConstraint) || hasNumber(e, errUniqueIndex))
}

// serverError returns the SQL Server error in err's chain, if any. go-mssqldb returns
// mssql.Error by value; a pointer is accepted too in case a wrapper takes its address.
func serverError(err error) (mssql.Error, bool) {
	var v mssql.Error
	if errors.As(err, &v) {
		return v, true
	}
	var p *mssql.Error
	if errors.As(err, &p) && p != nil {
		return *p, true
	}
	return mssql.Error{}, false
}

// hasNumber reports whether e (or any error of the batch it reports) has number n.
func hasNumber(e mssql.Error, n int32) bool {
	if e.Number == n {
		return true
	}
	for _, x := range e.All {
		if x.Number == n {
			return true
		}
	}
	return false
}

func isDeadlock(err error) bool {
	e, ok := serverError(err)
	return ok && hasNumber(e, errDeadlock)
}

// transientErrors are the error numbers after which the same work may succeed when run
// again, with nothing of it applied: lock and deadlock victims, and Azure SQL's
// reconfiguration and resource-governance errors (the database moving to another node
// or failing over, too many requests or sessions for its tier). The caller retries
// the whole unit: an autocommit statement, or its own transaction from the start.
var transientErrors = []int32{
	errDeadlock,         // 1205: chosen as deadlock victim
	1204,                // the instance cannot obtain a lock resource (lock memory exhausted)
	errLockTimeout,      // 1222: lock request time out period exceeded
	errSnapshotConflict, // 3960: snapshot update conflict
	4221,                // login to a readable secondary failed: its row versions are not ready after a restart
	10928,               // resource ID %d: the request or session limit for the database is reached
	10929,               // resource ID %d: the minimum guarantee is not available; the server is too busy
	40197,               // the service encountered an error processing the request (reconfiguration, failover)
	40501,               // the service is currently busy: retry after 10 seconds
	40613,               // database on server is not currently available (failover, reconfiguration)
	49918,               // not enough resources to process the request
	49919,               // cannot process create or update request: too many operations in progress
	49920,               // cannot process request: too many operations in progress
}

// isTransient reports whether e (or any error of its batch) has a transient number.
func isTransient(e mssql.Error) bool {
	for _, n := range transientErrors {
		if hasNumber(e, n) {
			return true
		}
	}
	return false
}

// translate marks transient server errors (transientErrors) as *outbox.RetryableError;
// everything else is returned unchanged.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var r *outbox.RetryableError
	if errors.As(err, &r) {
		return err
	}
	if e, ok := serverError(err); ok && isTransient(e) {
		return &outbox.RetryableError{Err: err}
	}
	return err
}

// wrap names the operation and translates err; nil stays nil.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := serverError(err); ok && hasNumber(e, errSetOptions) {
		return fmt.Errorf("sqlserver: %s: %w (%s)", op, err, setOptionsHint)
	}
	return fmt.Errorf("sqlserver: %s: %w", op, translate(err))
}

// setOptionsHint names the fix of error 1934 (see the package doc, Database settings).
const setOptionsHint = "the outbox table's filtered indexes need ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS, " +
	"CONCAT_NULL_YIELDS_NULL and QUOTED_IDENTIFIER ON and NUMERIC_ROUNDABORT OFF in every session that writes it; " +
	"a trigger or procedure keeps the QUOTED_IDENTIFIER and ANSI_NULLS it was created with: recreate the ones listed by " +
	"SELECT OBJECT_NAME(object_id) FROM sys.sql_modules WHERE uses_quoted_identifier = 0 OR uses_ansi_nulls = 0 " +
	"with both ON (sqlcmd -I)"

// invalid wraps a parameter error of the root package's checks (outbox.ErrInvalidArgument).
func invalid(err error) error { return fmt.Errorf("sqlserver: %w", err) }

// invalidf reports a parameter error of this dialect's own limits, wrapping
// outbox.ErrInvalidArgument like the root package's checks.
func invalidf(op, format string, args ...any) error {
	return fmt.Errorf("sqlserver: %w: %s: %s", outbox.ErrInvalidArgument, op, fmt.Sprintf(format, args...))
}

// deadlockRetries is how many times an autocommit statement chosen as a deadlock victim
// is run again. The victim's statement was rolled back whole, so running it again is
// safe; claimers and completers touching neighbouring keys meet such deadlocks now and
// then under load.
const deadlockRetries = 2

// retry runs fn, again while it fails as a deadlock victim (at most deadlockRetries more
// times) and ctx is live.
func retry(ctx context.Context, fn func() error) error {
	err := fn()
	for i := 0; i < deadlockRetries && err != nil && isDeadlock(err) && ctx.Err() == nil; i++ {
		err = fn()
	}
	return err
}

// IsStaleConn implements outbox.StaleConnChecker, which asks it about a BEGIN's error
// only. go-mssqldb reports driver.ErrBadConn (and database/sql takes another connection
// by itself) only for a connection it already knew was broken, or when sending failed.
// A pooled connection that the server closed cleanly while it sat idle (a gateway's
// or load balancer's idle timeout, a failover, a restart) is found out when the
// BEGIN's response is read: the driver returns the read's *net.OpError (wrapping
// io.EOF when the server closed the socket), or io.EOF itself. The transaction was
// never begun, so the caller may take another connection. The same errors later in a
// transaction are not stale connections: the transaction's outcome is what matters
// there, and publisher never asks.
func (s *Store) IsStaleConn(err error) bool { return isStaleConn(err) }

func isStaleConn(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller gave up; another connection would not help
	}
	var op *net.OpError
	return errors.Is(err, driver.ErrBadConn) || errors.As(err, &op) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// schemaErr names the fix when err says a table of the outbox does not exist (error
// 208, invalid object name); any other error is returned unchanged.
func (s *Store) schemaErr(err error) error {
	if e, ok := serverError(err); ok && hasNumber(e, errInvalidObject) {
		return outbox.SchemaMissing(err, "sqlserver", s.opts)
	}
	return err
}
