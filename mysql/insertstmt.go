package mysql

import (
	"context"
	"database/sql"
	"errors"
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
	// the next attempt.
	prepareRetry = time.Minute
	// erMaxPreparedStmts is ER_MAX_PREPARED_STMT_COUNT_REACHED: the server's
	// max_prepared_stmt_count is used up.
	erMaxPreparedStmts = 1461
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
}

func newInsertStmts(db *sql.DB, query func(cols int) string) *insertStmts {
	return &insertStmts{db: db, query: query, stmts: map[int]*sql.Stmt{}, pending: map[int]bool{}, retryAt: map[int]time.Time{}}
}

// get returns the statement for cols, or nil while it is not prepared. The first call
// for cols starts preparing it in the background: preparing needs a connection of the
// pool, and waiting for one here could wait for the caller's own transaction.
func (c *insertStmts) get(cols int) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.stmts[cols]; st != nil || c.closed || c.pending[cols] || time.Now().Before(c.retryAt[cols]) {
		return st
	}
	c.pending[cols] = true
	go c.prepare(cols, c.query(cols))
	return nil
}

func (c *insertStmts) prepare(cols int, query string) {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	st, err := c.db.PrepareContext(ctx, query)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, cols)
	switch {
	case err != nil:
		c.retryAt[cols] = time.Now().Add(prepareRetry)
	case c.closed:
		_ = st.Close()
	default:
		c.stmts[cols] = st
	}
}

// drop closes cols' statement after a connection could not prepare it; the column set
// goes as text until prepareRetry has passed.
func (c *insertStmts) drop(cols int, st *sql.Stmt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stmts[cols] == st {
		delete(c.stmts, cols)
		c.retryAt[cols] = time.Now().Add(prepareRetry)
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
	row := "(" + strings.Repeat("?,", placeholdersPerRow(cols)-1) + "?)"
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
func placeholdersPerRow(cols int) int {
	n := 6
	for _, bit := range [...]int{inscols.Lane, inscols.Key, inscols.Transport, inscols.Type, inscols.Tenant, inscols.Deliver} {
		if cols&bit != 0 {
			n++
		}
	}
	return n
}

// emptyHeadersBytes is emptyHeaders as a value.
var emptyHeadersBytes = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// argTimes formats the instants of a group, reusing the text of the last one (a
// batch's rows usually share their CreatedAt).
type argTimes struct {
	last time.Time
	text string
}

func (a *argTimes) arg(t time.Time) string {
	if a.text == "" || !t.Equal(a.last) {
		st, _ := timeArg(t) // validated
		a.last, a.text = t, string(st)
	}
	return a.text
}

// appendArgs appends the values of the rows of group, for preparedInsert(cols). Strings
// go as strings: the caller has checked that the connection's character set is
// utf8mb4, so that the server stores their bytes as they are.
func appendArgs(args []any, group []outbox.Record, cols int, times *argTimes) []any {
	for i := range group {
		r := &group[i]
		args = append(args, r.ID[:], r.MessageUUID)
		if cols&inscols.Lane != 0 {
			if r.Lane == outbox.Unordered {
				args = append(args, nil)
			} else {
				args = append(args, int64(r.Lane))
			}
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
		args = append(args, times.arg(r.CreatedAt))
		if cols&inscols.Deliver != 0 {
			if r.DeliverAt.IsZero() {
				args = append(args, times.arg(r.CreatedAt))
			} else {
				args = append(args, times.arg(r.DeliverAt))
			}
		}
	}
	return args
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

// utf8mb4Client reports whether the connection's character set is utf8mb4, read once
// through tx (the DSN sets it for every connection of the pool).
func (s *Store) utf8mb4Client(ctx context.Context, tx *sql.Tx) (bool, error) {
	switch s.clientCharset.Load() {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	var cs string
	if err := tx.QueryRowContext(ctx, "SELECT @@character_set_client").Scan(&cs); err != nil {
		return false, err
	}
	ok := cs == "utf8mb4"
	s.clientCharset.Store(map[bool]int32{true: 1, false: 2}[ok])
	return ok, nil
}

// insertPrepared inserts the full groups of preparedRows rows from start through the
// prepared statements and returns where it stopped: at the tail, at the first group
// whose values would not fit budget, or whose statement is not prepared yet.
func (s *Store) insertPrepared(ctx context.Context, tx *sql.Tx, records []outbox.Record, start, budget int) (int, error) {
	if len(records)-start < preparedRows {
		return start, nil
	}
	if ok, err := s.utf8mb4Client(ctx, tx); err != nil || !ok {
		return start, wrapErr("insert", err)
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
		if errors.As(err, &me) && me.Number == erMaxPreparedStmts {
			s.stmts.drop(cols, st) // nothing was written: the rest goes as text
			break
		}
		if err != nil {
			return start, wrapErr(fmtRows(start, start+preparedRows, len(records)), err)
		}
	}
	return start, nil
}
