package postgres

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
)

// SQLSTATEs of transient failures: the same operation may succeed when tried again.
const (
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateLockNotAvailable     = "55P03"

	sqlstateUndefinedTable    = "42P01" // relation does not exist
	sqlstateInvalidSchemaName = "3F000" // schema does not exist (Options.Schema)

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

// schemaErr names the fix when err says a table of the outbox (or its schema) does not
// exist; any other error is returned unchanged.
func (s *Store) schemaErr(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == sqlstateUndefinedTable || pg.Code == sqlstateInvalidSchemaName) {
		return outbox.SchemaMissing(err, dialect, s.opts)
	}
	return err
}

// checkDriver refuses a pool whose driver is not pgx's database/sql driver (a pool of
// OpenDB or WrapConnector reports pgx's driver too).
func checkDriver(db *sql.DB) error {
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		return nil
	}
	return fmt.Errorf("postgres: New: the pool's driver is %T, not pgx's: open it with sql.Open(\"pgx\", dsn) "+
		"(import _ \"github.com/jackc/pgx/v5/stdlib\"), stdlib.OpenDB or postgres.OpenDB; the store reads pgx's errors "+
		"(retryable failures, stale connections, missing tables) and sends pgx-encoded arrays", db.Driver())
}
