package mysql

import (
	"context"
	"database/sql"
	"errors"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/inscols"
)

const (
	// preparedRows is the row count of the prepared INSERT that carries a batch's full
	// groups of rows. The server parses it once per connection and takes the values in
	// binary, with no literal to lex: a 1,000-row batch goes about a third faster than
	// as hex text (benchmarks/README.md). Smaller groups cost more round trips; larger
	// ones leave a longer tail to the text path.
	preparedRows = 64
	// prepareTimeout bounds a background prepare (waiting for a free connection
	// included).
	prepareTimeout = 10 * time.Second
	// prepareRetry is how long a column set whose prepare failed goes as text before
	// the next attempt; refusedRetry the same after the server refused to prepare it on
	// a connection (max_prepared_stmt_count used up).
	prepareRetry = time.Minute
	refusedRetry = 10 * time.Minute
	// maxPreparedSets bounds the column sets a Store prepares (each is one statement per
	// connection of the pool, counted by the server's max_prepared_stmt_count); a batch
	// of any other set goes as text.
	maxPreparedSets = 4
	// erMaxPreparedStmts is ER_MAX_PREPARED_STMT_COUNT_REACHED: the server's
	// max_prepared_stmt_count is used up; erNeedReprepare is ER_NEED_REPREPARE (a
	// statement invalidated by concurrent DDL more often than the server re-prepares).
	// Either way nothing was written.
	erMaxPreparedStmts = 1461
	erNeedReprepare    = 1615
	// errOtherDB is the text of database/sql's error for a statement of one *sql.DB used
	// in a transaction of another (Tx.StmtContext; it is not exported): such a batch
	// goes as text.
	errOtherDB = "statement from different database used"
)

// insertStmts holds a store's prepared INSERTs of preparedRows rows, one per set of
// optional columns, each prepared on every connection that uses it (database/sql
// re-prepares a *sql.Stmt on each connection once).
type insertStmts struct {
	db    *sql.DB
	query func(cols int) string // the statement text for cols

	mu      sync.Mutex
	stmts   map[int]*sql.Stmt
	pending map[int]bool      // being prepared
	retryAt map[int]time.Time // not prepared again before
	closed  bool
	// charset is what the pool's connections use both ways (character_set_client and
	// character_set_connection): charsetUnknown until read; under charsetOther string
	// values would be converted, so everything goes as text.
	charset int
}

const (
	charsetUnknown = iota
	charsetUTF8MB4
	charsetOther
)

func newInsertStmts(db *sql.DB, query func(cols int) string) *insertStmts {
	return &insertStmts{db: db, query: query, stmts: map[int]*sql.Stmt{}, pending: map[int]bool{}, retryAt: map[int]time.Time{}}
}

// get returns the statement for cols, or nil while there is none. The first call for
// cols starts preparing it in the background: preparing needs a connection of the
// pool, and waiting for one here could wait for the caller's own transaction.
func (c *insertStmts) get(cols int) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.stmts[cols]; st != nil || c.closed || c.charset == charsetOther || c.pending[cols] || time.Now().Before(c.retryAt[cols]) ||
		len(c.stmts)+len(c.pending) >= maxPreparedSets {
		return st
	}
	c.pending[cols] = true
	go c.prepare(cols, c.query(cols))
	return nil
}

func (c *insertStmts) prepare(cols int, query string) {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	ok, err := c.utf8mb4(ctx)
	var st *sql.Stmt
	if err == nil && ok {
		st, err = c.db.PrepareContext(ctx, query)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, cols)
	switch {
	case err != nil:
		c.retryAt[cols] = time.Now().Add(prepareRetry)
	case !ok: // charsetOther: get prepares nothing more
	case c.closed:
		_ = st.Close()
	default:
		c.stmts[cols] = st
	}
}

// utf8mb4 reports whether the pool's connections send and read strings as utf8mb4 (the
// DSN sets the character sets of every connection), read once.
func (c *insertStmts) utf8mb4(ctx context.Context) (bool, error) {
	c.mu.Lock()
	cs := c.charset
	c.mu.Unlock()
	if cs == charsetUnknown {
		var client, conn string
		if err := c.db.QueryRowContext(ctx, "SELECT @@character_set_client, @@character_set_connection").Scan(&client, &conn); err != nil {
			return false, err
		}
		cs = charsetOther
		if client == "utf8mb4" && conn == "utf8mb4" {
			cs = charsetUTF8MB4
		}
		c.mu.Lock()
		c.charset = cs
		c.mu.Unlock()
	}
	return cs == charsetUTF8MB4, nil
}

// drop closes cols' statement after a connection could not prepare it; the column set
// goes as text for refusedRetry.
func (c *insertStmts) drop(cols int, st *sql.Stmt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stmts[cols] == st {
		delete(c.stmts, cols)
		c.retryAt[cols] = time.Now().Add(refusedRetry)
	}
	_ = st.Close()
}

// close closes every statement (when the Store is no longer reachable).
func (c *insertStmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for cols, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, cols)
	}
}

// preparedInsert is the INSERT of preparedRows rows naming the columns of cols, every
// value a placeholder (in appendArgs' order).
func preparedInsert(head string, cols int) string {
	// seq follows lane: a placeholder when the rows may hold a lane, else -1 (every row
	// of the group is unordered; see seqValue).
	row := "(?,?,-1," + strings.Repeat("?,", placeholdersPerRow(cols)-3) + "?)"
	if cols&inscols.Lane != 0 {
		row = "(?,?,?," + strings.Repeat("?,", placeholdersPerRow(cols)-4) + "?)"
	}
	var b strings.Builder
	b.Grow(len(head) + preparedRows*(len(row)+1))
	b.WriteString(head)
	for i := range preparedRows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}

// placeholdersPerRow counts the columns of insertHead(cols): id, message_uuid,
// destination, headers, body and created_at, and the optional ones cols names.
// With a lane, seq is one more (a placeholder; without, it is the literal -1).
func placeholdersPerRow(cols int) int {
	if cols&inscols.Lane != 0 {
		return 7 + bits.OnesCount(uint(cols))
	}
	return 6 + bits.OnesCount(uint(cols))
}

// emptyHeadersBytes is emptyHeaders as a value.
var emptyHeadersBytes = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// argTimes formats the instants of a group, reusing the text of the last created_at
// and deliver_at (a batch's rows usually share them).
type argTimes struct {
	created, deliver timeText
}

type timeText struct {
	last time.Time
	text string
}

func (a *timeText) arg(t time.Time) string {
	if a.text == "" || !t.Equal(a.last) {
		st, _ := timeArg(t) // validated
		a.last, a.text = t, string(st)
	}
	return a.text
}

// appendArgs appends the values of the rows of group, for preparedInsert(cols). Strings
// go as strings: statements are prepared only where the connections' character sets
// are utf8mb4, so that the server stores their bytes as they are.
func appendArgs(args []any, group []outbox.Record, cols int, times *argTimes) []any {
	for i := range group {
		r := &group[i]
		args = append(args, r.ID[:], r.MessageUUID)
		if cols&inscols.Lane != 0 { // an unordered row among ordered ones: -1, the column's default
			args = append(args, int64(r.Lane), seqArg(r))
		}
		if cols&inscols.Key != 0 {
			args = append(args, nullableBytes(r.OrderingKey))
		}
		if cols&inscols.Transport != 0 {
			args = append(args, r.Transport)
		}
		args = append(args, r.Destination)
		if cols&inscols.Type != 0 {
			args = append(args, nullableString(r.MessageType))
		}
		headers, body := r.Headers, r.Body
		if len(headers) == 0 {
			headers = emptyHeadersBytes
		}
		if body == nil {
			body = []byte{} // a nil []byte is sent as NULL
		}
		args = append(args, headers, body)
		if cols&inscols.Tenant != 0 {
			args = append(args, nullableString(r.TenantID))
		}
		args = append(args, times.created.arg(r.CreatedAt))
		if cols&inscols.Deliver != 0 {
			if r.DeliverAt.IsZero() {
				args = append(args, times.created.arg(r.CreatedAt))
			} else {
				args = append(args, times.deliver.arg(r.DeliverAt))
			}
		}
	}
	return args
}

// seqArg is seqValue as a bound value: NULL (numbered by AUTO_INCREMENT) or -1.
func seqArg(r *outbox.Record) any {
	if r.Lane == outbox.Unordered {
		return int64(-1)
	}
	return nil
}

func nullableString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullableBytes(s string) any {
	if s == "" {
		return nil
	}
	return keyArg(s)
}

// binEstimate bounds the bytes one row adds to a prepared execute packet: its values,
// each with a length prefix and a type entry.
func binEstimate(r *outbox.Record) int {
	return len(r.MessageUUID) + len(r.OrderingKey) + len(r.Transport) + len(r.Destination) +
		len(r.MessageType) + len(r.Headers) + len(r.Body) + len(r.TenantID) + len(r.ID) + 12*16
}

// insertPrepared inserts the full groups of preparedRows rows from start through the
// prepared statements and returns where it stopped: at the tail, or at the first group
// whose values would not fit budget, whose statement is not prepared (yet), or that the
// server or database/sql would not run prepared (that group and the rest then go as
// text).
func (s *Store) insertPrepared(ctx context.Context, tx *sql.Tx, records []outbox.Record, start, budget int) (int, error) {
	if len(records)-start < preparedRows {
		return start, nil
	}
	buf := getInsertBuf()
	defer putInsertBuf(buf)
	var (
		times  argTimes
		txStmt *sql.Stmt
		txCols = -1
	)
	for ; len(records)-start >= preparedRows; start += preparedRows {
		group := records[start : start+preparedRows]
		cols, size := 0, 0
		for i := range group {
			cols |= inscols.Of(&group[i])
			size += binEstimate(&group[i])
		}
		if size > budget {
			break
		}
		st := s.stmts.get(cols)
		if st == nil {
			break
		}
		if cols != txCols {
			txStmt, txCols = tx.StmtContext(ctx, st), cols
		}
		buf.args = appendArgs(buf.args[:0], group, cols, &times)
		_, err := txStmt.ExecContext(ctx, buf.args...)
		clear(buf.args)
		var me *mysql.MySQLError
		switch {
		case err == nil:
		case errors.As(err, &me) && (me.Number == erMaxPreparedStmts || me.Number == erNeedReprepare):
			s.stmts.drop(cols, st) // nothing was written
			return start, nil
		case strings.Contains(err.Error(), errOtherDB):
			return start, nil // tx belongs to another *sql.DB: nothing was sent
		default:
			return start, wrapErr(fmtRows(start, start+preparedRows, len(records)), err)
		}
	}
	return start, nil
}
