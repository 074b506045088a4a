package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/lanehead"
	"github.com/relayer-go/watermill-outbox/internal/lockedbatch"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
)

// DeadlockAttempts is how many times an operation runs when InnoDB picks it as a
// deadlock victim (1213) before the error is returned as an *outbox.RetryableError. SKIP
// LOCKED claims racing deletes at READ COMMITTED still deadlock now and then; the victim's
// work was rolled back, so running it again is safe and almost always succeeds. Lock wait
// timeouts (1205) are not retried: they already waited innodb_lock_wait_timeout.
const DeadlockAttempts = 3

// Store is the MySQL / MariaDB outbox.Store. It is safe for concurrent use.
type Store struct {
	db   *sql.DB
	opts outbox.Options
	q    *queries

	batches lockedbatch.Dialect // LockBatch's batches

	// laneKeyOK is set once the rows table was found keyed by (lane, id) (checkLaneKey).
	laneKeyOK atomic.Bool
	// isolation is the pool's session isolation as read once (isolationRead): 0 unread,
	// 1 READ COMMITTED or stronger, 2 READ UNCOMMITTED (Head then reads in a READ
	// COMMITTED transaction).
	isolation atomic.Int32
	// maxPacket caches the server's max_allowed_packet (0 until first read).
	maxPacket atomic.Int64
	// stmts holds the prepared INSERTs of full row groups.
	stmts *insertStmts

	// afterLock, when set (tests only), runs inside a claim transaction after the rows
	// are locked, so a test can hold the locks open.
	afterLock func()
}

var (
	_ outbox.Store            = (*Store)(nil)
	_ outbox.StaleConnChecker = (*Store)(nil)
)

// New returns a store over db (opened with github.com/go-sql-driver/mysql) for the tables
// opts names. Options are validated here: an invalid prefix or schema is an error
// wrapping outbox.ErrInvalidOptions that names the field. New does no I/O.
func New(db *sql.DB, opts outbox.Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: New: db is nil")
	}
	opts, err := validateOptions(opts)
	if err != nil {
		return nil, err
	}
	q := newQueries(newNames(opts), opts.Lanes)
	s := &Store{db: db, opts: opts, q: q}
	s.batches = lockedbatch.Dialect{Name: "mysql", Wrap: wrapErr, Finish: s.finishBatch, Retry: retryDeadlocks}
	s.stmts = newInsertStmts(db, func(cols int) string { return preparedInsert(q.insert[cols], cols) })
	// The statements belong to the pool's connections until closed: close them once
	// the Store is gone.
	runtime.AddCleanup(s, func(c *insertStmts) { c.close() }, s.stmts)
	return s, nil
}

// Options returns the validated options with defaults.
func (s *Store) Options() outbox.Options { return s.opts }

// DB returns the database the store runs its statements on.
func (s *Store) DB() *sql.DB { return s.db }

// CreateSchema runs CreateScript's statements one by one (the DSN needs no
// multiStatements). It is idempotent. It never alters an existing table: a rows table
// of an earlier schema gives an error wrapping outbox.ErrSchemaOutdated that says what
// to run (MigrateScript).
func (s *Store) CreateSchema(ctx context.Context) error {
	for _, stmt := range s.q.create {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return wrapErr("create schema", err)
		}
	}
	return wrapErr("create schema", s.checkLaneKey(ctx, s.db))
}

// inTx runs fn in a short READ COMMITTED transaction on a pooled connection. READ
// COMMITTED takes no gap locks, so locking reads never block the writers' inserts.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// inTxRetry is inTx, run again when the transaction was a deadlock victim.
func (s *Store) inTxRetry(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryDeadlocks(ctx, func() error { return s.inTx(ctx, fn) })
}

// invalid wraps a parameter error of the root package's checks (outbox.ErrInvalidArgument).
func invalid(err error) error { return fmt.Errorf("mysql: %w", err) }

// Read returns up to len(dst) eligible rows of q.Lane after q.After, in id order.
func (s *Store) Read(ctx context.Context, q outbox.ReadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	limit := len(dst)
	out := dst[:0]
	if err := q.Validate(s.opts.Lanes); err != nil {
		return out, invalid(err)
	}
	now, err := timeArg(q.Now)
	if err != nil {
		return out, fmt.Errorf("mysql: read: Now: %w", err)
	}
	var rows *sql.Rows
	if q.Lane == outbox.Unordered {
		rows, err = queryB(ctx, s.db, s.q.readUnordered, q.After[:], now, now, int64(limit))
	} else {
		rows, err = queryB(ctx, s.db, s.q.readLane, int64(q.Lane), q.After[:], now, now, int64(limit))
	}
	if err != nil {
		return out, wrapErr("read", err)
	}
	out, err = scanRecords(rows, out, limit)
	return out, wrapErr("read", err)
}

// Head returns the head run of lane q.Lane without locking or writing (see
// outbox.Store): pages of the lane's pending rows in seq order, cut at the first row
// that is not due or holds a live claim; rows of parked keys are passed over.
func (s *Store) Head(ctx context.Context, q outbox.HeadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	if err := q.Validate(s.opts.Lanes); err != nil {
		return dst[:0], invalid(err)
	}
	uncommitted, err := s.readsUncommitted(ctx)
	if err != nil {
		return dst[:0], wrapErr("head", err)
	}
	if !uncommitted {
		out, err := s.head(ctx, s.db, q, dst)
		return out, wrapErr("head", err)
	}
	// A pool whose sessions read uncommitted rows (tx_isolation in the DSN): the head
	// is read in a READ COMMITTED transaction, so that a row of a transaction that may
	// still roll back is never sent.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		return dst[:0], wrapErr("head", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	out, err := s.head(ctx, tx, q, dst)
	return out, wrapErr("head", err)
}

// head is Head's reads through e.
func (s *Store) head(ctx context.Context, e execQuerier, q outbox.HeadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	var parked map[string]int64
	if q.HoldParkedKeys {
		var err error
		if parked, err = s.parkedKeys(ctx, e, q.Lane); err != nil {
			return dst[:0], err
		}
	}
	now := q.Now.UTC().Truncate(time.Microsecond)
	return lanehead.Read(dst, q.Limit, parked, now, func(dst []outbox.Record, after int64, limit int) ([]outbox.Record, error) {
		rows, err := queryB(ctx, e, s.q.laneRun, int64(q.Lane), after, int64(limit))
		if err != nil {
			return dst, err
		}
		return scanRecords(rows, dst, len(dst)+limit)
	})
}

// readsUncommitted reports whether the pool's sessions run at READ UNCOMMITTED, read
// once per Store from a pooled session (MariaDB names the variable tx_isolation,
// Oracle MySQL 8 and later transaction_isolation). The claims and locked batches pin
// READ COMMITTED themselves; Head, a plain read, needs to know.
func (s *Store) readsUncommitted(ctx context.Context) (bool, error) {
	switch s.isolation.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	var level string
	err := s.db.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&level)
	if err != nil {
		if err2 := s.db.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&level); err2 != nil {
			return false, fmt.Errorf("read the session's isolation level: %w", errors.Join(err, err2))
		}
	}
	uncommitted := strings.EqualFold(level, "READ-UNCOMMITTED")
	if uncommitted {
		s.isolation.Store(2)
	} else {
		s.isolation.Store(1)
	}
	return uncommitted, nil
}

// scanRecords appends up to limit rows to dst and closes rows. A nil dst is allocated
// once, at the first row, with room for limit rows (at most sqlrows.PreallocMax).
func scanRecords(rows *sql.Rows, dst []outbox.Record, limit int) ([]outbox.Record, error) {
	defer rows.Close()
	sc := getScanner()
	defer putScanner(sc)
	for len(dst) < limit && rows.Next() {
		if dst == nil {
			dst = make([]outbox.Record, 0, min(limit, sqlrows.PreallocMax))
		}
		var r *outbox.Record
		dst, r = next(dst)
		if err := sc.scan(rows, r); err != nil {
			return dst[:len(dst)-1], err
		}
	}
	if err := rows.Err(); err != nil {
		return dst, err
	}
	return dst, rows.Close()
}

// Claim takes up to c.Limit eligible rows for c.Token (see outbox.Store).
func (s *Store) Claim(ctx context.Context, c outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	out := dst[:0]
	if err := c.Validate(s.opts.Lanes); err != nil {
		return out, invalid(err)
	}
	now, err := timeArg(c.Now)
	if err != nil {
		return out, fmt.Errorf("mysql: claim: Now: %w", err)
	}
	until, err := timeArg(c.Until)
	if err != nil {
		return out, fmt.Errorf("mysql: claim: Until: %w", err)
	}
	err = retryDeadlocks(ctx, func() error {
		var err error
		if c.Lane == outbox.Unordered {
			out, err = s.claimUnordered(ctx, c, now, until, dst[:0])
		} else {
			out, err = s.claimLane(ctx, c, now, until, dst[:0])
		}
		return err
	})
	if err != nil {
		return dst[:0], wrapErr("claim", err)
	}
	return out, nil
}

// retryDeadlocks runs fn until it succeeds, fails otherwise than by a deadlock, or has
// run DeadlockAttempts times. fn must start from scratch on every call.
func retryDeadlocks(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt >= DeadlockAttempts || !isDeadlock(err) || ctx.Err() != nil {
			return err
		}
		// Back off a little so that the winner finishes.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * time.Millisecond):
		}
	}
}

// exec runs one autocommit statement, again when it was a deadlock victim.
func (s *Store) exec(ctx context.Context, query string, args ...any) (res sql.Result, err error) {
	err = retryDeadlocks(ctx, func() error {
		res, err = execB(ctx, s.db, query, args...)
		return err
	})
	return res, err
}

func (s *Store) claimUnordered(ctx context.Context, c outbox.ClaimParams, now, until sqlTime, out []outbox.Record) ([]outbox.Record, error) {
	// An idle poll (nothing eligible) costs one non-locking read, not a transaction.
	var one int
	switch err := queryRowB(ctx, s.db, s.q.anyUnordered, c.After[:], now, now).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return out, nil
	case err != nil:
		return out, err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := queryB(ctx, tx, s.q.claimUnordered, c.After[:], now, now, int64(c.Limit))
		if err != nil {
			return err
		}
		if out, err = scanRecords(rows, out, c.Limit); err != nil {
			return err
		}
		if s.afterLock != nil {
			s.afterLock()
		}
		return s.setClaim(ctx, tx, c, until, out)
	})
	return out, err
}

// setClaim writes the claim of the locked rows in out and stamps them.
func (s *Store) setClaim(ctx context.Context, tx *sql.Tx, c outbox.ClaimParams, until sqlTime, out []outbox.Record) error {
	if len(out) == 0 {
		return nil
	}
	b := make([]byte, 0, len(s.q.setClaim)+len(out)*36+1)
	b = append(b, s.q.setClaim...)
	for i := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendHex(b, out[i].ID[:])
	}
	b = append(b, ')')
	b = appendSeqs(b, out[0].Lane, len(out), func(i int) int64 { return out[i].Seq })
	if _, err := execB(ctx, tx, string(b), c.Token[:], until, int64(out[0].Lane)); err != nil {
		return err
	}
	exp := c.Until.UTC().Truncate(time.Microsecond)
	for i := range out {
		out[i].ClaimToken = c.Token
		out[i].ClaimExpiresAt = exp
	}
	return nil
}

// claimLane claims the head of one lane. In one READ COMMITTED transaction it checks the
// lease (holding a shared lock on its row so that no takeover commits meanwhile), locks
// the head rows with SKIP LOCKED, and compares them with a non-locking read of the same
// head: a committed row that SKIP LOCKED passed over (someone else holds it) ends the run
// there, so rows are never taken out of order.
func (s *Store) claimLane(ctx context.Context, c outbox.ClaimParams, now, until sqlTime, out []outbox.Record) ([]outbox.Record, error) {
	if c.Lease.IsZero() {
		return out, nil
	}
	nowT := c.Now.UTC().Truncate(time.Microsecond)
	// Idle lanes are the common case (a forwarder polls all of its lanes): one
	// non-locking read of the head answers them without a transaction. Answering from
	// that snapshot is the same as claiming at that moment.
	var due, claimed []byte // Row.Scan refuses sql.RawBytes
	switch err := queryRowB(ctx, s.db, s.q.laneHead, int64(c.Lane)).Scan(&due, &claimed); {
	case errors.Is(err, sql.ErrNoRows):
		return out, nil
	case err != nil:
		return out, err
	case !c.HoldParkedKeys:
		d, err := parseTime(due)
		if err != nil {
			return out, err
		}
		exp, err := parseNullTime(claimed)
		if err != nil {
			return out, err
		}
		if d.After(nowT) || exp.After(nowT) {
			return out, nil // the head is not due or claimed: it holds the lane
		}
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := queryRowB(ctx, tx, s.q.leaseShare, int64(c.Lane), c.Lease[:]).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // not our live lease: fencing says nothing to claim
		}
		if err != nil {
			return err
		}
		var parked map[string]int64
		if c.HoldParkedKeys {
			if parked, err = s.parkedKeys(ctx, tx, c.Lane); err != nil {
				return err
			}
		}
		// Pages of the head, Limit rows first (bodies can be large); a further, larger
		// page only when parked keys held rows of this one.
		page := c.Limit
		var after int64
		var locked []outbox.Record
		ids := make([]outbox.ID, 0, page)
		for first := true; len(out) < c.Limit; first = false {
			if !first {
				page = min(page*2, max(c.Limit, 1024))
			}
			mark := len(out)
			var stop, skipped bool
			for attempt := 1; ; attempt++ {
				rows, err := queryB(ctx, tx, s.q.claimLaneLocked, int64(c.Lane), after, int64(page))
				if err != nil {
					return err
				}
				if locked, err = scanRecords(rows, locked[:0], page); err != nil {
					return err
				}
				if ids, err = s.visibleHead(ctx, tx, c.Lane, after, page, ids[:0]); err != nil {
					return err
				}
				out, stop, skipped = takeRun(out[:mark], locked, ids, parked, nowT, c.Limit)
				// A committed row SKIP LOCKED passed over is usually locked only for a
				// moment: by the transaction that just inserted it (InnoDB releases the
				// implicit lock a little after the commit is visible), or by a Complete of
				// the row before it. Look again shortly rather than report an empty head.
				if !skipped || attempt == headRetries {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(attempt) * time.Millisecond):
				}
			}
			if stop || skipped || len(locked) < page {
				break
			}
			after = locked[len(locked)-1].Seq
		}
		if s.afterLock != nil {
			s.afterLock()
		}
		return s.setClaim(ctx, tx, c, until, out)
	})
	return out, err
}

// headRetries is how many times a lane claim reads a page of the head when a committed
// row before the locked ones was skipped (locked by another transaction).
const headRetries = 3

// takeRun appends to out the leading run of locked (in seq order) that may be claimed:
// it stops at a row not due or with a live claim (stop), and at a row that the
// non-locking read ids shows before it but SKIP LOCKED passed over (skipped). Rows whose
// key has an earlier parked row (parked) are passed over without stopping.
func takeRun(out, locked []outbox.Record, ids []outbox.ID, parked map[string]int64, now time.Time, limit int) (_ []outbox.Record, stop, skipped bool) {
	for i := range locked {
		r := &locked[i]
		if i >= len(ids) || ids[i] != r.ID {
			return out, false, true
		}
		if held, ok := parked[r.OrderingKey]; ok && r.OrderingKey != "" && held < r.Seq {
			continue // its key is parked: neither claimed nor holding the lane
		}
		if r.DeliverAt.After(now) || r.ClaimExpiresAt.After(now) {
			return out, true, false // not due, or claimed by someone else: holds the lane
		}
		var dst *outbox.Record
		out, dst = next(out)
		copyRecord(dst, r)
		if len(out) == limit {
			return out, false, false
		}
	}
	// Every locked row matched; a visible row past them was skipped when the locked read
	// came back short of the visible one.
	return out, false, len(ids) > len(locked)
}

// visibleHead reads the ids of the lane head without locking (the committed state).
func (s *Store) visibleHead(ctx context.Context, tx *sql.Tx, lane int, after int64, limit int, ids []outbox.ID) ([]outbox.ID, error) {
	rows, err := queryB(ctx, tx, s.q.claimLaneVisible, int64(lane), after, int64(limit))
	if err != nil {
		return ids, err
	}
	defer rows.Close()
	var raw sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&raw); err != nil {
			return ids, err
		}
		var id outbox.ID
		copy(id[:], raw)
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// parkedKeys returns, per ordering key of lane, the smallest seq of its parked rows.
func (s *Store) parkedKeys(ctx context.Context, tx execQuerier, lane int) (map[string]int64, error) {
	rows, err := queryB(ctx, tx, s.q.parkedKeys, int64(parkedLane(lane)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := make(map[string]int64)
	var key sql.RawBytes
	var seq int64
	for rows.Next() {
		if err := rows.Scan(&key, &seq); err != nil {
			return nil, err
		}
		m[string(key)] = seq
	}
	return m, rows.Err()
}

// copyRecord copies src into dst reusing dst's buffers.
func copyRecord(dst, src *outbox.Record) {
	headers, body := dst.Headers, dst.Body
	*dst = *src
	dst.Headers = append(headers[:0], src.Headers...)
	dst.Body = append(body[:0], src.Body...)
}

// fence appends the lease check of ordered mutations and its arguments.
func (s *Store) fence(b []byte, args []any, lane int, lease outbox.Token) ([]byte, []any) {
	if lane == outbox.Unordered {
		return b, args
	}
	return append(b, s.q.leaseLive...), append(args, int64(lane), lease[:])
}

// unfenced reports an ordered operation without a lease: it changes nothing (the zero
// token is never a live lease).
func unfenced(lane int, lease outbox.Token) bool {
	return lane != outbox.Unordered && lease.IsZero()
}

// Renew extends the live claims of r.Token to r.Until (never shortening them) and
// returns how many live claims it found. The UPDATE's affected-rows count misses rows
// whose expiry did not change (unless the DSN sets clientFoundRows), so the matched rows
// are counted in the same transaction, after the UPDATE has locked them.
func (s *Store) Renew(ctx context.Context, r outbox.RenewParams) (int, error) {
	if err := r.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	now, err := timeArg(r.Now)
	if err != nil {
		return 0, fmt.Errorf("mysql: renew: Now: %w", err)
	}
	until, err := timeArg(r.Until)
	if err != nil {
		return 0, fmt.Errorf("mysql: renew: Until: %w", err)
	}
	if r.Token.IsZero() || (r.IDs != nil && len(r.IDs) == 0) || unfenced(r.Lane, r.Lease) {
		return 0, ctx.Err()
	}
	var idFilter []byte
	if len(r.IDs) > 0 {
		idFilter = append(idFilter, " AND id IN ("...)
		idFilter = appendIDList(idFilter, r.IDs)
		idFilter = append(idFilter, ')')
	}
	idFilter = appendSeqs(idFilter, r.Lane, 0, nil)
	update := s.q.renewUpdate + string(idFilter)
	count := s.q.renewCount + string(idFilter)
	var found int64
	err = s.inTxRetry(ctx, func(tx *sql.Tx) error {
		found = 0
		if r.Lane != outbox.Unordered {
			var one int
			err := queryRowB(ctx, tx, s.q.leaseShare, int64(r.Lane), r.Lease[:]).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		if _, err := execB(ctx, tx, update, until, int64(r.Lane), r.Token[:], now); err != nil {
			return err
		}
		return queryRowB(ctx, tx, count, int64(r.Lane), r.Token[:], now).Scan(&found)
	})
	if err != nil {
		return 0, wrapErr("renew", err)
	}
	return int(found), nil
}

// appendSeqs narrows a write by lane and id to the primary key (lane, seq, id): an
// unordered row's seq is -1; rows of a lane are found by the n seqs seq(i) the caller
// read, when it gives them (n > 0), and otherwise by a walk of the lane.
func appendSeqs(b []byte, lane, n int, seq func(i int) int64) []byte {
	if lane == outbox.Unordered {
		return append(b, " AND seq = -1"...)
	}
	if n == 0 {
		return b
	}
	b = append(b, " AND seq IN ("...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, seq(i), 10)
	}
	return append(b, ')')
}

// Complete deletes the rows among c.IDs whose live claim is c.Token.
func (s *Store) Complete(ctx context.Context, c outbox.CompleteParams) (int, error) {
	if err := c.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	now, err := timeArg(c.Now)
	if err != nil {
		return 0, fmt.Errorf("mysql: complete: Now: %w", err)
	}
	laneRun := c.Token.IsZero() && c.Lane != outbox.Unordered
	if len(c.IDs) == 0 || (c.Token.IsZero() && !laneRun) || unfenced(c.Lane, c.Lease) {
		return 0, ctx.Err()
	}
	b := make([]byte, 0, len(s.q.complete)+len(s.q.leaseLive)+len(c.IDs)*36+16)
	args := []any{int64(c.Lane), c.Token[:], now}
	if laneRun {
		b, args = append(b, s.q.completeLane...), []any{int64(c.Lane)}
	} else {
		b = append(b, s.q.complete...)
	}
	b = append(b, " AND id IN ("...)
	b = appendIDList(b, c.IDs)
	b = append(b, ')')
	b = appendSeqs(b, c.Lane, len(c.Seqs), func(i int) int64 { return c.Seqs[i] })
	b, args = s.fence(b, args, c.Lane, c.Lease)
	b = append(b, " ORDER BY seq, id LIMIT "...)
	b = strconv.AppendInt(b, int64(len(c.IDs)), 10)
	res, err := s.exec(ctx, string(b), args...)
	if err != nil {
		return 0, wrapErr("complete", err)
	}
	n, err := res.RowsAffected()
	return int(n), wrapErr("complete", err)
}

// Release gives back the live claims of r.Token (all, or only r.IDs) without counting an
// attempt. The token always changes to NULL, so affected rows is exact.
func (s *Store) Release(ctx context.Context, r outbox.ReleaseParams) (int, error) {
	if err := r.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	now, err := timeArg(r.Now)
	if err != nil {
		return 0, fmt.Errorf("mysql: release: Now: %w", err)
	}
	if r.Token.IsZero() || (r.IDs != nil && len(r.IDs) == 0) || unfenced(r.Lane, r.Lease) {
		return 0, ctx.Err()
	}
	b := make([]byte, 0, len(s.q.release)+len(s.q.leaseLive)+len(r.IDs)*36+16)
	b = append(b, s.q.release...)
	if len(r.IDs) > 0 {
		b = append(b, " AND id IN ("...)
		b = appendIDList(b, r.IDs)
		b = append(b, ')')
	}
	b = appendSeqs(b, r.Lane, 0, nil)
	args := []any{int64(r.Lane), r.Token[:], now}
	b, args = s.fence(b, args, r.Lane, r.Lease)
	res, err := s.exec(ctx, string(b), args...)
	if err != nil {
		return 0, wrapErr("release", err)
	}
	n, err := res.RowsAffected()
	return int(n), wrapErr("release", err)
}

// Fail records a failed attempt of f.ID under its live claim, in one statement.
func (s *Store) Fail(ctx context.Context, f outbox.FailParams) (bool, error) {
	if err := f.Validate(s.opts.Lanes); err != nil {
		return false, invalid(err)
	}
	now, err := timeArg(f.Now)
	if err != nil {
		return false, fmt.Errorf("mysql: fail: Now: %w", err)
	}
	headRow := f.Token.IsZero() && f.Lane != outbox.Unordered
	if (f.Token.IsZero() && !headRow) || unfenced(f.Lane, f.Lease) {
		return false, ctx.Err()
	}
	var retry []byte // NULL keeps deliver_at
	if f.RetryAt.After(f.Now) {
		at, err := timeArg(f.RetryAt)
		if err != nil {
			return false, fmt.Errorf("mysql: fail: RetryAt: %w", err)
		}
		retry = []byte(at)
	}
	park := int64(0)
	if f.Park {
		park = 1
	}
	q, args := []byte(s.q.fail), []any{errorText(f.Error), retry, park, park, int64(f.Lane), f.ID[:], f.Token[:], now}
	if headRow {
		q, args = []byte(s.q.failLane), []any{errorText(f.Error), retry, park, park, int64(f.Lane), f.ID[:]}
	}
	if f.Seq > 0 {
		q = appendSeqs(q, f.Lane, 1, func(int) int64 { return f.Seq })
	} else {
		q = appendSeqs(q, f.Lane, 0, nil)
	}
	q, args = s.fence(q, args, f.Lane, f.Lease)
	// attempts always changes, so affected rows is exact whatever clientFoundRows says.
	res, err := s.exec(ctx, string(q), args...)
	if err != nil {
		return false, wrapErr("fail", err)
	}
	n, err := res.RowsAffected()
	return n > 0, wrapErr("fail", err)
}

// errorText makes an error message storable in the TEXT column: valid UTF-8, at most
// 64 KiB (cut on a character boundary).
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxLastError {
		cut := maxLastError
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// Park moves one pending row without a live claim to parked, storing reason.
func (s *Store) Park(ctx context.Context, id outbox.ID, reason string, now time.Time) (bool, error) {
	nowArg, err := timeArg(now)
	if err != nil {
		return false, fmt.Errorf("mysql: park: now: %w", err)
	}
	// status changes from pending, so affected rows is exact.
	res, err := s.exec(ctx, s.q.park, errorText(reason), id[:], nowArg)
	if err != nil {
		return false, wrapErr("park", err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return n > 0, wrapErr("park", err)
	}
	var n int64
	err = s.inTxRetry(ctx, func(tx *sql.Tx) error {
		res, err := execB(ctx, tx, s.q.parkLanes, errorText(reason), id[:], nowArg)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n > 0, wrapErr("park", err)
}

// Count returns the number of eligible rows across all lanes.
func (s *Store) Count(ctx context.Context, now time.Time) (int64, error) {
	nowArg, err := timeArg(now)
	if err != nil {
		return 0, fmt.Errorf("mysql: count: now: %w", err)
	}
	var n int64
	if err := queryRowB(ctx, s.db, s.q.count, nowArg, nowArg).Scan(&n); err != nil {
		return 0, wrapErr("count", err)
	}
	return n, nil
}

// Stats returns the eligible backlog per lane and the parked count.
func (s *Store) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	var st outbox.Stats
	nowArg, err := timeArg(now)
	if err != nil {
		return st, fmt.Errorf("mysql: stats: now: %w", err)
	}
	rows, err := queryB(ctx, s.db, s.q.statsLanes, nowArg, nowArg)
	if err != nil {
		return st, wrapErr("stats", err)
	}
	defer rows.Close()
	var lane, oldest sql.RawBytes
	for rows.Next() {
		var ls outbox.LaneStats
		if err := rows.Scan(&lane, &ls.Eligible, &oldest); err != nil {
			return outbox.Stats{}, wrapErr("stats", err)
		}
		ls.Lane = outbox.Unordered
		if lane != nil {
			v, err := parseInt(lane)
			if err != nil {
				return outbox.Stats{}, wrapErr("stats", err)
			}
			ls.Lane = int(v)
		}
		if ls.OldestEligible, err = parseNullTime(oldest); err != nil {
			return outbox.Stats{}, wrapErr("stats", err)
		}
		st.Lanes = append(st.Lanes, ls)
	}
	if err := rows.Err(); err != nil {
		return outbox.Stats{}, wrapErr("stats", err)
	}
	if err := queryRowB(ctx, s.db, s.q.statsParked).Scan(&st.Parked); err != nil {
		return outbox.Stats{}, wrapErr("stats", err)
	}
	return st, nil
}

// MaxLane returns the greatest lane in the table, or outbox.Unordered.
func (s *Store) MaxLane(ctx context.Context) (int, error) {
	if err := s.checkLaneKey(ctx, s.db); err != nil {
		return 0, wrapErr("max lane", s.schemaErr(err))
	}
	var hi, lo int64 // the greatest and least stored lane values
	if err := queryRowB(ctx, s.db, s.q.maxLane).Scan(&hi, &lo); err != nil {
		return 0, wrapErr("max lane", s.schemaErr(err))
	}
	return max(laneOf(int(hi)), laneOf(int(lo)), outbox.Unordered), nil
}

// PendingLanes walks the lanes below Options.Lanes holding pending rows, one index dive per lane found.
func (s *Store) PendingLanes(ctx context.Context) ([]int, error) {
	var lanes []int
	for after := int64(-1); ; {
		var next sql.NullInt64
		if err := queryRowB(ctx, s.db, s.q.nextPendingLane, after).Scan(&next); err != nil {
			return nil, wrapErr("pending lanes", err)
		}
		if !next.Valid || int(next.Int64) >= s.opts.Lanes {
			return lanes, nil // the lanes above are out of range (MaxLane reports them)
		}
		lanes = append(lanes, int(next.Int64))
		after = next.Int64
	}
}

// ListParked returns up to q.Limit parked rows after q.After in id order.
func (s *Store) ListParked(ctx context.Context, q outbox.ParkedQuery) ([]outbox.Record, error) {
	if err := q.Validate(); err != nil {
		return nil, invalid(err)
	}
	var rows *sql.Rows
	var err error
	maxBody := int64(math.MaxUint32) // LONGBLOB's bound: the whole payload
	if q.MaxBody > 0 {
		maxBody = int64(q.MaxBody)
	}
	switch {
	case q.OrderingKey == nil:
		rows, err = queryB(ctx, s.db, s.q.listParked, maxBody, q.After[:], int64(q.Limit))
	case *q.OrderingKey == "": // stored as NULL, as parkedWhere selects it
		rows, err = queryB(ctx, s.db, s.q.listParkedNullKey, maxBody, q.After[:], int64(q.Limit))
	default:
		rows, err = queryB(ctx, s.db, s.q.listParkedKey, maxBody, q.After[:], keyArg(*q.OrderingKey), int64(q.Limit))
	}
	if err != nil {
		return nil, wrapErr("list parked", err)
	}
	defer rows.Close()
	sc := getScanner()
	defer putScanner(sc)
	out := make([]outbox.Record, 0, min(q.Limit, 256))
	for len(out) < q.Limit && rows.Next() {
		out = append(out, outbox.Record{})
		if err := sc.scanSized(rows, &out[len(out)-1]); err != nil {
			return nil, wrapErr("list parked", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("list parked", err)
	}
	return out, nil
}

// keyArg binds an ordering key for the VARBINARY column (a []byte compares bytewise
// with no character set conversion).
func keyArg(k string) []byte { return []byte(k) }

// parkedWhere appends the selector of Requeue and Purge to their statement (which ends
// in "WHERE status = 'parked'").
func parkedWhere(b []byte, f outbox.ParkedFilter) ([]byte, []any, error) {
	if err := f.Validate(); err != nil {
		return nil, nil, invalid(err)
	}
	switch {
	case f.IDs != nil:
		if len(f.IDs) == 0 {
			return append(b, " AND FALSE"...), nil, nil // an empty list selects no row
		}
		b = append(b, " AND id IN ("...)
		b = appendIDList(b, f.IDs)
		b = append(b, ')')
		return b, nil, nil
	case f.OrderingKey != nil:
		if *f.OrderingKey == "" {
			return append(b, " AND ordering_key IS NULL"...), nil, nil
		}
		return append(b, " AND ordering_key = ?"...), []any{keyArg(*f.OrderingKey)}, nil
	default:
		return b, nil, nil
	}
}

// Requeue moves the selected parked rows back to pending, due at the server's now,
// attempts 0.
func (s *Store) Requeue(ctx context.Context, f outbox.ParkedFilter) (int, error) {
	b, args, err := parkedWhere([]byte(s.q.requeue), f)
	if err != nil {
		return 0, err
	}
	res, err := s.exec(ctx, string(b), args...)
	if err != nil {
		return 0, wrapErr("requeue", err)
	}
	n, err := res.RowsAffected() // status changes: exact
	return int(n), wrapErr("requeue", err)
}

// Purge deletes the selected parked rows.
func (s *Store) Purge(ctx context.Context, f outbox.ParkedFilter) (int, error) {
	b, args, err := parkedWhere([]byte(s.q.purge), f)
	if err != nil {
		return 0, err
	}
	res, err := s.exec(ctx, string(b), args...)
	if err != nil {
		return 0, wrapErr("purge", err)
	}
	n, err := res.RowsAffected()
	return int(n), wrapErr("purge", err)
}

func (s *Store) checkLease(l outbox.LeaseParams) error {
	if err := l.Validate(s.opts.Lanes); err != nil {
		return invalid(err)
	}
	if utf8.RuneCountInString(l.Owner) > maxOwner {
		return invalid(fmt.Errorf("%w: lease: Owner is %d characters long; at most %d fit", outbox.ErrInvalidArgument, utf8.RuneCountInString(l.Owner), maxOwner))
	}
	return nil
}

// AcquireLease takes l.Lane for l.Token when it is free or expired on the server's
// clock, or extends it when l.Token already holds it: one autocommit upsert, then a
// read of who holds the lane.
func (s *Store) AcquireLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := s.checkLease(l); err != nil {
		return false, err
	}
	ttl, tok := l.TTL.Microseconds(), l.Token[:]
	if _, err := s.exec(ctx, s.q.leaseAcquire, int64(l.Lane), l.Owner, tok, ttl, tok, tok, l.Owner, tok, tok, ttl); err != nil {
		return false, wrapErr("acquire lease", err)
	}
	var held bool
	if err := queryRowB(ctx, s.db, s.q.leaseHeld, tok, int64(l.Lane)).Scan(&held); err != nil {
		return false, wrapErr("acquire lease", err)
	}
	return held, nil
}

// RenewLease extends the live lease of l.Token (never shortening it), in one statement.
func (s *Store) RenewLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := s.checkLease(l); err != nil {
		return false, err
	}
	// renewals changes on every renewal, so affected rows counts the live lease even when
	// its expiry stays, whatever clientFoundRows says.
	res, err := s.exec(ctx, s.q.leaseRenew, l.TTL.Microseconds(), int64(l.Lane), l.Token[:])
	if err != nil {
		return false, wrapErr("renew lease", err)
	}
	n, err := res.RowsAffected()
	return n > 0, wrapErr("renew lease", err)
}

// ReleaseLease deletes the lease of lane held with token, live or not.
func (s *Store) ReleaseLease(ctx context.Context, lane int, token outbox.Token) (bool, error) {
	if err := outbox.ValidateLane("release lease", lane, s.opts.Lanes); err != nil {
		return false, invalid(err)
	}
	res, err := s.exec(ctx, s.q.leaseRelease, int64(lane), token[:])
	if err != nil {
		return false, wrapErr("release lease", err)
	}
	n, err := res.RowsAffected()
	return n > 0, wrapErr("release lease", err)
}

// Leases lists every lease row, ordered by lane.
func (s *Store) Leases(ctx context.Context) ([]outbox.Lease, error) {
	rows, err := queryB(ctx, s.db, s.q.leases)
	if err != nil {
		return nil, wrapErr("leases", err)
	}
	defer rows.Close()
	var out []outbox.Lease
	var token, exp sql.RawBytes
	for rows.Next() {
		var l outbox.Lease
		var lane int64
		if err := rows.Scan(&lane, &l.Owner, &token, &exp, &l.Live); err != nil {
			return nil, wrapErr("leases", err)
		}
		l.Lane = int(lane)
		copy(l.Token[:], token)
		if l.ExpiresAt, err = parseTime(exp); err != nil {
			return nil, wrapErr("leases", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("leases", err)
	}
	return out, nil
}

// Heartbeat records that owner is alive for ttl on the server's clock.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := outbox.ValidateOwner("heartbeat", owner, maxOwner); err != nil {
		return invalid(err)
	}
	if err := outbox.CheckTTL("heartbeat", ttl); err != nil {
		return invalid(err)
	}
	_, err := s.exec(ctx, s.q.heartbeat, owner, ttl.Microseconds(), ttl.Microseconds())
	return wrapErr("heartbeat", err)
}

// Members lists the owners whose heartbeat is live on the server's clock, sorted.
func (s *Store) Members(ctx context.Context) ([]string, error) {
	rows, err := queryB(ctx, s.db, s.q.members)
	if err != nil {
		return nil, wrapErr("members", err)
	}
	out, err := sqlrows.Strings(rows)
	if err != nil {
		return nil, wrapErr("members", err)
	}
	// The collation sorts by code point but pads spaces; Go order is the contract.
	if !sort.StringsAreSorted(out) {
		slices.Sort(out)
	}
	return out, nil
}

// Leave removes owner's heartbeat.
func (s *Store) Leave(ctx context.Context, owner string) error {
	if err := outbox.ValidateOwner("leave", owner, maxOwner); err != nil {
		return invalid(err)
	}
	_, err := s.exec(ctx, s.q.leave, owner)
	return wrapErr("leave", err)
}
