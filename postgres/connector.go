package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/watermill-outbox/internal/beginfirst"
)

// dialect names this package's statements for the connector (beginfirst).
const dialect = "postgres"

// OpenDB opens a pool of pgx connections (pgx.ParseConfig's DSN forms, options as
// stdlib.OpenDB's) through [WrapConnector]: an inbox record then travels in the round
// trip of its transaction's BEGIN. Everything else is stdlib.OpenDB's pool.
func OpenDB(dsn string, opts ...stdlib.OptionOpenDB) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	return sql.OpenDB(WrapConnector(stdlib.GetConnector(*cfg, opts...))), nil
}

// WrapConnector returns c with one addition: a transaction that a Store begins with a
// first statement of its own (Store.BeginRecordInbox) sends its BEGIN and that
// statement in one pipeline, one round trip, where database/sql would send the BEGIN
// and wait for it first. Every other call, including every transaction the application
// begins, goes to c's connection unchanged.
//
// pgx tracers see that transaction's BEGIN and record as one batch (TraceBatchStart,
// TraceBatchQuery, TraceBatchEnd) where stdlib's pool shows a query each.
//
// c is a pgx stdlib connector (stdlib.GetConnector, stdlib.GetPoolConnector); the
// connections of another connector are passed through as they are (nothing is sent in
// one round trip then). A driver connection of the returned connector is not a
// *stdlib.Conn: code that reaches it through (*sql.Conn).Raw takes the *pgx.Conn with
//
//	pc := driverConn.(interface{ Conn() *pgx.Conn }).Conn()
//
// which works for both.
func WrapConnector(c driver.Connector) driver.Connector {
	return beginfirst.Connector(c, func(dc driver.Conn) (driver.Conn, error) {
		if sc, ok := dc.(*stdlib.Conn); ok {
			return &conn{stdConn: sc}, nil
		}
		return dc, nil
	})
}

// stdConn is stdlib's connection under a name that leaves its Conn method promoted.
type stdConn = stdlib.Conn

// conn is a stdlib connection whose BeginTx runs a store's first statement in the
// BEGIN's round trip. Every other method (Conn included) is stdlib's.
type conn struct{ *stdConn }

// BeginTx begins as stdlib does, or, when ctx carries a store's first statement,
// sends BEGIN and the statement in one pipeline (pgx's Batch.BeginTx).
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	first := beginfirst.From(ctx, dialect)
	if first == nil {
		return c.stdConn.BeginTx(ctx, opts)
	}
	pc := c.Conn()
	if pc.IsClosed() {
		return nil, driver.ErrBadConn
	}
	txOpts, err := pgxTxOptions(opts)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.BeginTx(txOpts)
	q := b.Queue(first.Query, first.Args...)
	if len(first.Dest) > 0 {
		q.QueryRow(func(row pgx.Row) error { return row.Scan(first.Dest...) })
	}
	br := pc.SendBatch(ctx, b)
	ptx := br.Tx()
	if err := br.Close(); err != nil {
		// The BEGIN may have gone through before the statement failed: end the
		// transaction as pgx does (a connection it cannot roll back is closed).
		_ = ptx.Rollback(ctx)
		if pgconn.SafeToRetry(err) {
			return nil, driver.ErrBadConn // nothing was sent: database/sql takes another connection
		}
		return nil, err
	}
	first.Ran = true
	return tx{ctx: ctx, tx: ptx}, nil
}

// pgxTxOptions maps database/sql's options as stdlib's BeginTx does.
func pgxTxOptions(opts driver.TxOptions) (pgx.TxOptions, error) {
	var o pgx.TxOptions
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		o.IsoLevel = pgx.Serializable
	default:
		return o, fmt.Errorf("unsupported isolation: %v", opts.Isolation)
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o, nil
}

// tx is the pgx transaction of a batch begun by conn.BeginTx, ended as stdlib ends
// its own (under the context it was begun with).
type tx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t tx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t tx) Rollback() error { return t.tx.Rollback(t.ctx) }
