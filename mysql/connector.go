package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/internal/beginfirst"
)

// dialect names this package's statements for the connector (beginfirst).
const dialect = "mysql"

// OpenDB opens a pool of go-sql-driver/mysql connections for dsn through
// [NewConnector]: an inbox record then travels in the round trip of its transaction's
// BEGIN.
func OpenDB(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w", err)
	}
	c, err := NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// NewConnector returns a go-sql-driver/mysql connector for cfg (which it copies) with
// one addition: a transaction that a Store begins with a first statement of its own
// (Store.BeginRecordInbox) sends START TRANSACTION and that statement as one query, one
// round trip, where database/sql would send START TRANSACTION and wait for it first.
// Every other call, including every transaction the application begins, goes to the
// driver's connection unchanged.
//
// The price, and why this is not the way every pool is opened: sending two statements
// as one query needs the driver's MultiStatements, which the connector turns on for its
// connections. A query text may then hold several statements: a query that the
// application builds by pasting untrusted text into SQL, which is an injection bug with
// or without it, could then run a second statement of the attacker's. Queries with
// placeholders stay safe: their values are sent apart from the SQL text, or, with interpolateParams,
// escaped into it by the driver. The store's own statement is text with its values
// inlined as hex literals (no character of a value reaches the SQL text).
func NewConnector(cfg *mysql.Config) (driver.Connector, error) {
	if cfg == nil {
		return nil, errors.New("mysql: NewConnector: cfg is nil")
	}
	c := cfg.Clone()
	c.MultiStatements = true
	inner, err := mysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("mysql: NewConnector: %w", err)
	}
	return beginfirst.Connector(inner, newConn), nil
}

// driverConn is what go-sql-driver's connection implements and database/sql uses.
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
}

// conn is a go-sql-driver connection whose BeginTx runs a store's first statement in
// the BEGIN's round trip. Every other method is the driver's.
type conn struct{ driverConn }

func newConn(dc driver.Conn) (driver.Conn, error) {
	inner, ok := dc.(driverConn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("mysql: connector: driver connection %T lacks a method of go-sql-driver/mysql's", dc)
	}
	return &conn{driverConn: inner}, nil
}

// BeginTx begins as the driver does, or, when ctx carries a store's first statement,
// sends START TRANSACTION and the statement as one query.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	first := beginfirst.From(ctx, dialect)
	if first == nil {
		return c.driverConn.BeginTx(ctx, opts)
	}
	q, err := beginSQL(opts)
	if err != nil {
		return nil, err
	}
	res, err := c.ExecContext(ctx, q+";"+first.Query, nil)
	if err != nil {
		// START TRANSACTION may have run before the statement failed. With ErrBadConn
		// the driver has closed the connection (before sending, or after a read-only
		// error under rejectReadOnly), which ends any transaction on the server.
		if !errors.Is(err, driver.ErrBadConn) {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
		}
		return nil, err
	}
	if first.Affected, err = res.RowsAffected(); err != nil {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
		return nil, err
	}
	first.Ran = true
	return &tx{c: c, ctx: ctx}, nil
}

// beginSQL is what the driver sends to begin a transaction with opts.
func beginSQL(opts driver.TxOptions) (string, error) {
	q := ""
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		q = "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;"
	case sql.LevelReadCommitted:
		q = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"
	case sql.LevelRepeatableRead:
		q = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;"
	case sql.LevelSerializable:
		q = "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;"
	default:
		return "", fmt.Errorf("mysql: unsupported isolation level: %v", opts.Isolation)
	}
	if opts.ReadOnly {
		return q + "START TRANSACTION READ ONLY", nil
	}
	return q + "START TRANSACTION", nil
}

// tx is a transaction begun by conn.BeginTx with a first statement; it ends as the
// driver's own does, with COMMIT or ROLLBACK on the connection, and with the driver's
// errors for a connection it has closed meanwhile (a cancelled statement's context
// closes it): the context's cause when the transaction's context ended, else
// ErrInvalidConn, never database/sql's ErrBadConn.
type tx struct {
	c   *conn
	ctx context.Context
}

func (t *tx) Commit() error   { return t.end("COMMIT") }
func (t *tx) Rollback() error { return t.end("ROLLBACK") }

func (t *tx) end(q string) error {
	if !t.c.IsValid() {
		return t.closedErr()
	}
	if _, err := t.c.ExecContext(context.Background(), q, nil); err != nil {
		if errors.Is(err, driver.ErrBadConn) {
			return t.closedErr()
		}
		return err
	}
	return nil
}

func (t *tx) closedErr() error {
	if t.ctx.Err() != nil {
		return context.Cause(t.ctx)
	}
	return mysql.ErrInvalidConn
}
