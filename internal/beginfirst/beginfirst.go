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

import "context"

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
