package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// engine is one database under test: its pool and the few dialect differences the
// harness's hand-written SQL needs.
type engine struct {
	name   string // "mysql" or "postgres"
	driver string
	dsn    string
	db     *sql.DB
}

func openEngine(name, dsn string) (*engine, error) {
	e := &engine{name: name, dsn: dsn}
	switch name {
	case "mysql":
		e.driver = "mysql"
	case "postgres":
		e.driver = "pgx"
	default:
		return nil, fmt.Errorf("unknown database %q (want mysql or postgres)", name)
	}
	if err := e.open(); err != nil {
		return nil, err
	}
	return e, nil
}

// reopen closes e's pool and opens a new one: the next section starts on connections
// that served nothing else. After the brokers section, PostgreSQL's publish section
// reusing its pool's last connection ran at 0.75–0.77 of the minimal row against
// 0.84–0.86 on a new pool (2026-12-07): a server process that has served a section's
// tables and statements is not the one a section measures.
func (e *engine) reopen() error {
	e.db.Close()
	return e.open()
}

// open opens e's pool and waits until the server answers.
func (e *engine) open() error {
	db, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		return err
	}
	// database/sql keeps only 2 idle connections by default, so every concurrent
	// contender would reconnect constantly; all of them get the same pool.
	// PostgreSQL allows 100 connections by default and the harness shares the server
	// (with a child process at times): at most 32 here. Idle ones stay for the next
	// contender, as a long-running forwarder's pool stays warm: with idle connections
	// closed after 3 s (the fill between two contenders takes longer), each PostgreSQL
	// ordered drain opened 19 to 28 new server processes and paid their start (fork,
	// catalog caches, statement preparation) inside its timing, about 1 s of server
	// CPU per 100,000 rows against 3 or 4 new ones for the raw loop (2026-12-05).
	db.SetMaxIdleConns(32)
	db.SetMaxOpenConns(32)
	db.SetConnMaxIdleTime(2 * time.Minute)
	// A busy server may refuse a connection for a moment (too many clients): retry.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			db.Close()
			return fmt.Errorf("%s: %w", e.name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.db = db
	return nil
}

// checkAutovacuum refuses a PostgreSQL server with autovacuum off (some CI images turn
// it off; scripts/services turns it back on). Every run creates and drops tables, and
// without autovacuum the system catalogs keep their dead rows: on 2026-12-05 a session's
// PostgreSQL figures fell run by run (ours ordered into Kafka from 63k to 49k msgs/s over
// an hour) with 87,000 dead rows in pg_attribute.
func (e *engine) checkAutovacuum(ctx context.Context) error {
	if e.name != "postgres" {
		return nil
	}
	var on string
	if err := e.db.QueryRowContext(ctx, "SHOW autovacuum").Scan(&on); err != nil {
		return fmt.Errorf("postgres: SHOW autovacuum: %w", err)
	}
	if on != "on" {
		return errors.New("postgres: autovacuum is off on this server, so the catalogs bloat as the harness creates and drops tables and the figures fall run by run; " +
			"turn it on (scripts/services postgres does: ALTER SYSTEM SET autovacuum = on)")
	}
	return nil
}

// newStore returns the library's store for opts on this engine.
func (e *engine) newStore(opts outbox.Options) (outbox.Store, error) {
	if e.name == "mysql" {
		return mysql.New(e.db, opts)
	}
	return postgres.New(e.db, opts)
}

// quote quotes one identifier (the harness's names are plain lowercase ASCII).
func (e *engine) quote(ident string) string {
	if e.name == "mysql" {
		return "`" + ident + "`"
	}
	return `"` + ident + `"`
}

// ph returns the i-th (1-based) placeholder.
func (e *engine) ph(i int) string {
	if e.name == "mysql" {
		return "?"
	}
	return "$" + strconv.Itoa(i)
}

// unorderedLane is the lane value of an unordered row in our table: -1 on MySQL, whose
// primary key (lane, id) holds no NULL, NULL elsewhere; unorderedWhere selects such rows,
// and names the lane in the hand-written loop's delete on MySQL (a lookup by key).
func (e *engine) unorderedLane() any {
	if e.name == "mysql" {
		return -1
	}
	return nil
}

func (e *engine) unorderedWhere() string {
	if e.name == "mysql" {
		return "lane = -1 AND seq = -1"
	}
	return "lane IS NULL"
}

// retryable reports a deadlock or serialization failure worth retrying.
func (e *engine) retryable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "1213") || strings.Contains(s, "1205") || strings.Contains(s, "40P01") || strings.Contains(s, "40001")
}

func newPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench_" + hex.EncodeToString(b[:]) + "_"
}

// outboxTable is one fresh outbox table (and its lanes/nodes tables) of the library.
type outboxTable struct {
	e     *engine
	store outbox.Store
	opts  outbox.Options
}

func (e *engine) newOutboxTable(ctx context.Context) (*outboxTable, error) {
	opts := outbox.Options{TablePrefix: newPrefix(), Lanes: 64}
	st, err := e.newStore(opts)
	if err != nil {
		return nil, err
	}
	if err := st.CreateSchema(ctx); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	return &outboxTable{e: e, store: st, opts: st.Options()}, nil
}

func (t *outboxTable) name() string { return t.e.quote(t.opts.OutboxTable()) }

func (t *outboxTable) rows(ctx context.Context) (int64, error) {
	var n int64
	err := t.e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.name()).Scan(&n)
	return n, err
}

func (t *outboxTable) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range t.opts.TableNames() {
		_, _ = t.e.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.e.quote(n))
	}
}

// wmTables is one set of watermill-sql tables (messages and, for the default schema,
// offsets) for one topic.
type wmTables struct {
	e       *engine
	prefix  string
	topic   string
	queue   bool // queue schema with DeleteOnAck instead of the default schema + offsets
	batch   int
	schema  wmsql.SchemaAdapter
	offsets wmsql.OffsetsAdapter
}

const wmTopic = "forwarder_topic"

func (e *engine) messagesName(prefix, topic string) string { return prefix + "wm_" + topic }
func (e *engine) offsetsName(prefix, topic string) string  { return prefix + "wm_offsets_" + topic }
func (w *wmTables) messagesTable() string                  { return w.e.quote(w.e.messagesName(w.prefix, w.topic)) }
func (w *wmTables) offsetsTable() string                   { return w.e.quote(w.e.offsetsName(w.prefix, w.topic)) }

// newWMTables builds the schema adapters of watermill-sql v4 for a fresh table set and
// creates the tables (the way SubscribeInitialize does).
func (e *engine) newWMTables(ctx context.Context, queue bool, batch int) (*wmTables, error) {
	w := &wmTables{e: e, prefix: newPrefix(), topic: wmTopic, queue: queue, batch: batch}
	msgs := func(topic string) string { return e.quote(e.messagesName(w.prefix, topic)) }
	offs := func(topic string) string { return e.quote(e.offsetsName(w.prefix, topic)) }
	switch {
	case e.name == "mysql" && !queue:
		w.schema = wmsql.DefaultMySQLSchema{GenerateMessagesTableName: msgs, SubscribeBatchSize: batch}
		w.offsets = wmsql.DefaultMySQLOffsetsAdapter{GenerateMessagesOffsetsTableName: offs}
	case e.name == "mysql" && queue:
		w.schema = wmsql.MySQLQueueSchema{GenerateMessagesTableName: msgs, SubscribeBatchSize: batch}
		w.offsets = wmsql.MySQLQueueOffsetsAdapter{GenerateMessagesTableName: msgs, DeleteOnAck: true}
	case !queue:
		w.schema = wmsql.DefaultPostgreSQLSchema{GenerateMessagesTableName: msgs, SubscribeBatchSize: batch}
		w.offsets = wmsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: offs}
	default:
		w.schema = wmsql.PostgreSQLQueueSchema{GenerateMessagesTableName: msgs, SubscribeBatchSize: batch}
		w.offsets = wmsql.PostgreSQLQueueOffsetsAdapter{GenerateMessagesTableName: msgs, DeleteOnAck: true}
	}
	sub, err := w.subscriber(time.Second)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(w.topic); err != nil {
		return nil, fmt.Errorf("watermill-sql schema: %w", err)
	}
	return w, nil
}

func (w *wmTables) subscriber(poll time.Duration) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(w.e.db), wmsql.SubscriberConfig{
		SchemaAdapter:  w.schema,
		OffsetsAdapter: w.offsets,
		PollInterval:   poll,
	}, nil)
}

// publisherOn returns watermill-sql's publisher writing through tx (schema already
// initialised, as watermill-sql requires for a transaction).
func (w *wmTables) publisherOn(tx *sql.Tx) (*wmsql.Publisher, error) {
	return wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: w.schema}, nil)
}

func (w *wmTables) rows(ctx context.Context) (int64, error) {
	var n int64
	err := w.e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+w.messagesTable()).Scan(&n)
	return n, err
}

// acked reports the default schema's acked offset of the (empty) consumer group.
func (w *wmTables) acked(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := w.e.db.QueryRowContext(ctx, "SELECT MAX(offset_acked) FROM "+w.offsetsTable()).Scan(&n)
	return n.Int64, err
}

func (w *wmTables) maxOffset(ctx context.Context) (int64, error) {
	col := `"offset"`
	if w.e.name == "mysql" {
		col = "`offset`"
	}
	var n sql.NullInt64
	err := w.e.db.QueryRowContext(ctx, "SELECT MAX("+col+") FROM "+w.messagesTable()).Scan(&n)
	return n.Int64, err
}

func (w *wmTables) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = w.e.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+w.messagesTable())
	_, _ = w.e.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+w.offsetsTable())
}

// quiesce waits until the database has no background work left from the previous
// contender (MariaDB/MySQL: the purge of deleted rows' undo history, which would
// otherwise slow down whoever runs next), for at most a minute.
func (e *engine) quiesce(ctx context.Context) {
	if e.name != "mysql" {
		return
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var n int64
		err := e.db.QueryRowContext(ctx, `SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'`).Scan(&n)
		if err != nil || n < 1000 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
