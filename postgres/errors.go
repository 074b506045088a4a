package postgres

import (
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	outbox "github.com/relayer-go/watermill-outbox"
)

// SQLSTATEs of transient failures: the same operation may succeed when tried again.
const (
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateLockNotAvailable     = "55P03"

	// A connection the server ended: an administrator or a restart (57P01), a crash of
	// another backend (57P02); the session is gone, nothing of the failed statement ran.
	sqlstateAdminShutdown = "57P01"
	sqlstateCrashShutdown = "57P02"
)

// isRetryableCode reports whether a SQLSTATE denotes a transient failure that this
// dialect reports as *outbox.RetryableError.
func isRetryableCode(code string) bool {
	switch code {
	case sqlstateSerializationFailure, sqlstateDeadlockDetected, sqlstateLockNotAvailable:
		return true
	}
	return false
}

// translate is the driver edge: transient server errors become *outbox.RetryableError;
// everything else passes through unchanged (still matchable with errors.As).
func translate(err error) error {
	if err == nil {
		return nil
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && isRetryableCode(pg.Code) {
		var r *outbox.RetryableError
		if errors.As(err, &r) {
			return err
		}
		return &outbox.RetryableError{Err: err}
	}
	return err
}

// wrap names the operation and translates err.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("postgres: %s: %w", op, translate(err))
}

// IsStaleConn implements outbox.StaleConnChecker: a pooled connection that the server
// ended while it sat idle reports 57P01 (or 57P02) to the next statement, or fails
// before pgx sent anything; database/sql does not take another connection by itself.
func (s *Store) IsStaleConn(err error) bool { return isStaleConn(err) }

func isStaleConn(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == sqlstateAdminShutdown || pg.Code == sqlstateCrashShutdown
	}
	return errors.Is(err, driver.ErrBadConn) || pgconn.SafeToRetry(err)
}
