package sqlserver

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
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

// translate marks transient server errors as *outbox.RetryableError; everything else is
// returned unchanged.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var r *outbox.RetryableError
	if errors.As(err, &r) {
		return err
	}
	if e, ok := serverError(err); ok && (hasNumber(e, errDeadlock) || hasNumber(e, errLockTimeout) || hasNumber(e, errSnapshotConflict)) {
		return &outbox.RetryableError{Err: err}
	}
	return err
}

// wrap names the operation and translates err; nil stays nil.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlserver: %s: %w", op, translate(err))
}

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

// IsStaleConn implements outbox.StaleConnChecker: go-mssqldb reports a pooled
// connection the server closed as driver.ErrBadConn.
func (s *Store) IsStaleConn(err error) bool { return errors.Is(err, driver.ErrBadConn) }

// schemaErr names the fix when err says a table of the outbox does not exist (error
// 208, invalid object name); any other error is returned unchanged.
func (s *Store) schemaErr(err error) error {
	if e, ok := serverError(err); ok && hasNumber(e, errInvalidObject) {
		return outbox.SchemaMissing(err, "sqlserver", s.opts)
	}
	return err
}
