// Package beginfirst is the seam between a dialect's store and its connector
// (postgres.WrapConnector, mysql.NewConnector): a store asks for a statement to run as
// the first one of the transaction it begins, and a connector that can sends it in the
// round trip of the BEGIN itself.
//
// The store puts a *Statement into the context it passes to (*sql.DB).BeginTx; the
// connection's BeginTx (database/sql hands it that context) runs it and sets Ran. A
// pool of another connector ignores the context value and begins as usual; the store
// then sees Ran false and runs the statement in the transaction itself. Either way the
// statement runs once, inside the transaction.
package beginfirst

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Statement is a transaction's first statement.
type Statement struct {
	// Dialect names the connector that may run it ("postgres", "mysql"), so that a
	// statement never reaches another engine's connection.
	Dialect string
	// Query and Args are the statement. A MySQL statement comes with its values inlined
	// (Args empty): it travels as text behind the BEGIN.
	Query string
	Args  []any
	// Dest receives the statement's one row (PostgreSQL: a RETURNING clause). Empty
	// for a statement that returns no row.
	Dest []any
	// Affected is the statement's affected-row count (MySQL), set when it ran.
	Affected int64
	// Ran is set once the connector has begun the transaction and run the statement in
	// it successfully.
	Ran bool
}

type key struct{}

// With returns ctx carrying s for the connector of the transaction begun with it.
func With(ctx context.Context, s *Statement) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// From returns the statement ctx carries for dialect that has not run yet, or nil.
func From(ctx context.Context, dialect string) *Statement {
	s, _ := ctx.Value(key{}).(*Statement)
	if s == nil || s.Ran || s.Dialect != dialect {
		return nil
	}
	return s
}

// Begin begins a transaction on db with opts whose first statement is first: in the
// BEGIN's round trip where db's connector runs it (first.Ran), else right after the
// BEGIN, in the transaction. Either way first's Dest or Affected hold its result when
// Begin returns. When the statement fails the transaction is rolled back and the
// driver's error returned; a nil db is an error wrapping outbox.ErrInvalidArgument.
func Begin(ctx context.Context, db *sql.DB, opts *sql.TxOptions, first *Statement) (*sql.Tx, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", outbox.ErrInvalidArgument)
	}
	tx, err := db.BeginTx(With(ctx, first), opts)
	if err != nil || first.Ran {
		return tx, err
	}
	if err := first.runIn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// runIn runs the statement in tx, as a connector would have.
func (s *Statement) runIn(ctx context.Context, tx *sql.Tx) error {
	if len(s.Dest) > 0 {
		return tx.QueryRowContext(ctx, s.Query, s.Args...).Scan(s.Dest...)
	}
	res, err := tx.ExecContext(ctx, s.Query, s.Args...)
	if err != nil {
		return err
	}
	s.Affected, err = res.RowsAffected()
	return err
}

// Connector wraps inner so that each of its connections passes through wrap (which
// returns the connection that runs first statements with the BEGIN, or the connection
// itself). Driver and Close are inner's.
func Connector(inner driver.Connector, wrap func(driver.Conn) (driver.Conn, error)) driver.Connector {
	return &connector{inner: inner, wrap: wrap}
}

type connector struct {
	inner driver.Connector
	wrap  func(driver.Conn) (driver.Conn, error)
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return c.wrap(dc)
}

func (c *connector) Driver() driver.Driver { return c.inner.Driver() }

// Close closes the wrapped connector when it has a Close (sql.DB.Close calls it).
func (c *connector) Close() error {
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}
