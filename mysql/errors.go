package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Server error numbers that mean "try again".
const (
	erLockWaitTimeout = 1205
	erLockDeadlock    = 1213
	erCheckRead       = 1020 // MariaDB 11.6+ snapshot isolation: record changed since read
	erDupEntry        = 1062
	erBadField        = 1054 // unknown column
	erNoSuchTable     = 1146 // table doesn't exist

	// MySQL 8.0.24+ closes a connection idle past wait_timeout with this error, which
	// the next statement reads.
	erClientInteractionTimeout = 4031
)

// translate marks transient server errors as *outbox.RetryableError; everything else is
// returned unchanged.
func translate(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erLockWaitTimeout, erLockDeadlock, erCheckRead:
			return &outbox.RetryableError{Err: err}
		}
	}
	return err
}

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erLockDeadlock
}

func isDupEntry(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erDupEntry
}

// wrapErr names the operation and translates the driver error.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mysql: %s: %w", op, translate(err))
}

// IsStaleConn implements outbox.StaleConnChecker: a pooled connection the server
// closed while it sat idle. The driver usually notices before sending (its liveness
// check) and database/sql then retries by itself; this covers what gets through.
func (s *Store) IsStaleConn(err error) bool { return isStaleConn(err) }

func isStaleConn(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erClientInteractionTimeout
}

// schemaErr names the fix when err says a table of the outbox does not exist (1146);
// any other error is returned unchanged. (A database that does not exist, 1049, is the
// DBA's to create: CreateSchema does not.)
func (s *Store) schemaErr(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erNoSuchTable {
		return outbox.SchemaMissing(err, dialect, s.opts)
	}
	return err
}
