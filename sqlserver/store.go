package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/lanehead"
	"github.com/relayer-go/watermill-outbox/internal/lockedbatch"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
)

// maxOwnerUnits is the size of the owner columns (nvarchar(400): the nodes table's key
// must stay within SQL Server's 900-byte clustered key limit).
const maxOwnerUnits = 400

// maxIDsPerStatement bounds the ids one statement lists, keeping it under SQL Server's
// 2,100 parameters with room for the other parameters.
const maxIDsPerStatement = 2000

// Store is the SQL Server outbox.Store.
type Store struct {
	db       *sql.DB
	opts     outbox.Options
	q        *queries
	script   []string
	scanners sync.Pool
	batches  lockedbatch.Dialect // LockBatch's batches
}

var (
	_ outbox.Store            = (*Store)(nil)
	_ outbox.StaleConnChecker = (*Store)(nil)
)

// New returns a store over db (opened with the "sqlserver" driver of go-mssqldb) for the
// tables opts names. It validates opts (errors wrap outbox.ErrInvalidOptions and name
// the field) and does not touch the database.
func New(db *sql.DB, opts outbox.Options) (*Store, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("sqlserver: New: nil *sql.DB")
	}
	s := &Store{db: db, opts: opts, q: newQueries(newNames(opts)), script: createStatements(opts)}
	s.batches = lockedbatch.Dialect{Name: "sqlserver", Wrap: wrap, Finish: s.finishBatch, Retry: retry}
	return s, nil
}

// Options returns the validated options with defaults.
func (s *Store) Options() outbox.Options { return s.opts }

// DB returns the database the store runs its statements on.
func (s *Store) DB() *sql.DB { return s.db }

// schemaLock serialises concurrent CreateSchema calls in one database (several
// forwarders starting at once): two guarded CREATE TABLEs of the same name would
// otherwise race, and the loser fail with "There is already an object named ...".
const (
	schemaLock = "DECLARE @r int;\n" +
		"EXEC @r = sp_getapplock @Resource = N'watermill-outbox/create-schema', @LockMode = N'Exclusive', " +
		"@LockOwner = N'Session', @LockTimeout = 60000;\n" +
		"IF @r < 0 RAISERROR(N'watermill-outbox: sp_getapplock for the schema returned %d', 16, 1, @r);"
	schemaUnlock = "EXEC sp_releaseapplock @Resource = N'watermill-outbox/create-schema', @LockOwner = N'Session';"
)

// CreateSchema runs CreateScript's statements in order on one connection, holding an
// application lock so that concurrent calls run one after another.
func (s *Store) CreateSchema(ctx context.Context) (err error) {
	if err := s.checkSeq(ctx); err != nil { // an existing rows table of an earlier schema
		return wrap("create schema", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return wrap("create schema", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, schemaLock); err != nil {
		return wrap("create schema", err)
	}
	defer func() {
		// Released even when ctx has ended: a session lock would otherwise stay with
		// the pooled connection.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := conn.ExecContext(rctx, schemaUnlock); rerr != nil && err == nil {
			err = wrap("create schema", rerr)
		}
	}()
	for _, stmt := range s.script {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return wrap("create schema", err)
		}
	}
	return nil
}

func named(name string, v any) sql.NamedArg { return sql.Named(name, v) }

// fenceArgs appends @lane and @lease for an ordered operation.
// ttlArg is a lease or heartbeat TTL in whole milliseconds (at least one).
func ttlArg(ttl time.Duration) any { return named("ttl", int32(max(ttl.Milliseconds(), 1))) }

func fenceArgs(args []any, lane int, lease outbox.Token) []any {
	if lane == outbox.Unordered {
		return args
	}
	return append(args, named("lane", int32(lane)), named("lease", lease[:]))
}

// query runs a row-returning statement, again when chosen as a deadlock victim.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	var rows *sql.Rows
	err := retry(ctx, func() error {
		var err error
		rows, err = s.db.QueryContext(ctx, query, args...)
		return err
	})
	return rows, err
}

// changed runs a counted statement (see counted) and returns the number of rows it
// changed, which the statement selects; again when chosen as a deadlock victim.
func (s *Store) changed(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := retry(ctx, func() error { return s.db.QueryRowContext(ctx, query, args...).Scan(&n) })
	return int(n), err
}

// exec runs a statement whose row count nobody reads, again when chosen as a deadlock
// victim.
func (s *Store) exec(ctx context.Context, query string, args ...any) error {
	return retry(ctx, func() error {
		_, err := s.db.ExecContext(ctx, query, args...)
		return err
	})
}

// Read returns up to len(dst) eligible rows of q.Lane after q.After, in id order.
func (s *Store) Read(ctx context.Context, q outbox.ReadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	if err := q.Validate(s.opts.Lanes); err != nil {
		return dst[:0], invalid(err)
	}
	if len(dst) == 0 {
		return dst, ctx.Err()
	}
	args := []any{named("n", int64(len(dst))), named("after", q.After[:]), named("now", q.Now.UTC())}
	query := s.q.readUnordered
	if q.Lane != outbox.Unordered {
		query = s.q.readLane
		args = append(args, named("lane", int32(q.Lane)))
	}
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return dst[:0], wrap("read", err)
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	n := 0
	for n < len(dst) && rows.Next() {
		if err := sc.scan(rows, &dst[n]); err != nil {
			rows.Close()
			return dst[:0], wrap("read", err)
		}
		n++
	}
	if err := sqlrows.Close(rows); err != nil {
		return dst[:0], wrap("read", err)
	}
	return dst[:n], nil
}

// Head returns the head run of lane q.Lane without claiming (see outbox.Store): pages
// of the lane's pending rows in id order, cut at the first row that is not due or holds
// a live claim; rows of parked keys are passed over.
func (s *Store) Head(ctx context.Context, q outbox.HeadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	if err := q.Validate(s.opts.Lanes); err != nil {
		return dst[:0], invalid(err)
	}
	var parked map[string]int64
	if q.HoldParkedKeys {
		var err error
		if parked, err = s.parkedKeys(ctx, q.Lane); err != nil {
			return dst[:0], wrap("head", err)
		}
	}
	out, err := lanehead.Read(dst, q.Limit, parked, q.Now, func(dst []outbox.Record, after int64, limit int) ([]outbox.Record, error) {
		return s.scanPage(ctx, dst, limit, s.q.laneRun, named("n", int64(limit)), named("after", after), named("lane", int32(q.Lane)))
	})
	return out, wrap("head", err)
}

// scanPage appends up to limit rows of query to dst, reusing dst's storage.
func (s *Store) scanPage(ctx context.Context, dst []outbox.Record, limit int, query string, args ...any) ([]outbox.Record, error) {
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return dst, err
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	return sqlrows.Append(rows, dst, limit, sc.scan)
}

// parkedKeys returns, per ordering key of lane, the smallest seq of its parked rows.
func (s *Store) parkedKeys(ctx context.Context, lane int) (map[string]int64, error) {
	rows, err := s.query(ctx, s.q.parkedKeys, named("lane", int32(lane)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := make(map[string]int64)
	for rows.Next() {
		var key string
		var seq int64
		if err := rows.Scan(&key, &seq); err != nil {
			return nil, err
		}
		if held, ok := m[key]; !ok || seq < held {
			m[key] = seq
		}
	}
	return m, rows.Err()
}

// Claim takes up to c.Limit eligible rows for c.Token in one UPDATE.
func (s *Store) Claim(ctx context.Context, c outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	dst = dst[:0]
	if err := c.Validate(s.opts.Lanes); err != nil {
		return dst, invalid(err)
	}
	args := []any{named("n", int64(c.Limit)), named("now", c.Now.UTC()), named("until", c.Until.UTC()), named("tok", c.Token[:])}
	query := s.q.claimUnordered
	if c.Lane == outbox.Unordered {
		args = append(args, named("after", c.After[:]))
	} else {
		query = s.q.claimLane
		if c.HoldParkedKeys {
			query = s.q.claimLaneHold
		}
		args = fenceArgs(args, c.Lane, c.Lease)
	}
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return dst, wrap("claim", err)
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	for rows.Next() {
		dst = grow(dst)
		if err := sc.scan(rows, &dst[len(dst)-1]); err != nil {
			rows.Close()
			// The claim has committed; its rows come back when it expires.
			return dst[:0], wrap("claim", err)
		}
	}
	if err := sqlrows.Close(rows); err != nil {
		return dst[:0], wrap("claim", err)
	}
	return dst, nil
}

// grow extends dst by one record, reusing the storage (and buffers) of an element past
// len when there is one.
func grow(dst []outbox.Record) []outbox.Record {
	if len(dst) < cap(dst) {
		return dst[:len(dst)+1]
	}
	return append(dst, outbox.Record{})
}

// idArgs appends @i1... for ids.
func idArgs(args []any, ids []outbox.ID) []any {
	for i := range ids {
		args = append(args, named(fmt.Sprintf("i%d", i+1), ids[i][:]))
	}
	return args
}

// chunkIDs calls fn for consecutive pieces of ids of at most maxIDsPerStatement and
// sums what it returns.
func chunkIDs(ids []outbox.ID, fn func(part []outbox.ID) (int, error)) (int, error) {
	total := 0
	for len(ids) > 0 {
		k := min(len(ids), maxIDsPerStatement)
		n, err := fn(ids[:k])
		total += n
		if err != nil {
			return total, err
		}
		ids = ids[k:]
	}
	return total, nil
}

// Renew extends the live claims of r.Token; it never shortens an expiry.
func (s *Store) Renew(ctx context.Context, r outbox.RenewParams) (int, error) {
	if err := r.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	if r.Token.IsZero() || (r.IDs != nil && len(r.IDs) == 0) {
		return 0, nil
	}
	fenced := r.Lane != outbox.Unordered
	base := fenceArgs([]any{named("tok", r.Token[:]), named("now", r.Now.UTC()), named("until", r.Until.UTC())}, r.Lane, r.Lease)
	if len(r.IDs) == 0 {
		n, err := s.changed(ctx, s.q.renew(0, fenced), base...)
		return n, wrap("renew", err)
	}
	n, err := chunkIDs(r.IDs, func(part []outbox.ID) (int, error) {
		return s.changed(ctx, s.q.renew(len(part), fenced), idArgs(base[:len(base):len(base)], part)...)
	})
	return n, wrap("renew", err)
}

// Release gives back the live claims of r.Token (only r.IDs when given) without
// counting an attempt: the rows are eligible again at once.
func (s *Store) Release(ctx context.Context, r outbox.ReleaseParams) (int, error) {
	if err := r.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	if r.Token.IsZero() || (r.IDs != nil && len(r.IDs) == 0) {
		return 0, nil
	}
	fenced := r.Lane != outbox.Unordered
	base := fenceArgs([]any{named("tok", r.Token[:]), named("now", r.Now.UTC())}, r.Lane, r.Lease)
	if len(r.IDs) == 0 {
		n, err := s.changed(ctx, s.q.release(0, fenced), base...)
		return n, wrap("release", err)
	}
	n, err := chunkIDs(r.IDs, func(part []outbox.ID) (int, error) {
		return s.changed(ctx, s.q.release(len(part), fenced), idArgs(base[:len(base):len(base)], part)...)
	})
	return n, wrap("release", err)
}

// Complete deletes the rows among c.IDs whose live claim is c.Token.
func (s *Store) Complete(ctx context.Context, c outbox.CompleteParams) (int, error) {
	if err := c.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	fenced := c.Lane != outbox.Unordered
	if len(c.IDs) == 0 || (c.Token.IsZero() && !fenced) || (fenced && c.Lease.IsZero()) {
		return 0, nil
	}
	if c.Token.IsZero() { // a lane run read with Head: fenced by the lease alone
		base := fenceArgs(nil, c.Lane, c.Lease)
		n, err := chunkIDs(c.IDs, func(part []outbox.ID) (int, error) {
			return s.changed(ctx, s.q.completeLane(len(part)), idArgs(base[:len(base):len(base)], part)...)
		})
		return n, wrap("complete", err)
	}
	base := fenceArgs([]any{named("tok", c.Token[:]), named("now", c.Now.UTC())}, c.Lane, c.Lease)
	n, err := chunkIDs(c.IDs, func(part []outbox.ID) (int, error) {
		return s.changed(ctx, s.q.complete(len(part), fenced), idArgs(base[:len(base):len(base)], part)...)
	})
	return n, wrap("complete", err)
}

// Fail records a failed attempt of one row held with f.Token, in one statement.
func (s *Store) Fail(ctx context.Context, f outbox.FailParams) (bool, error) {
	if err := f.Validate(s.opts.Lanes); err != nil {
		return false, invalid(err)
	}
	headRow := f.Token.IsZero() && f.Lane != outbox.Unordered
	if (f.Token.IsZero() && !headRow) || (f.Lane != outbox.Unordered && f.Lease.IsZero()) {
		return false, nil
	}
	// @retry > @now moves deliver_at; passing now itself keeps it.
	retryAt := f.Now
	if f.RetryAt.After(f.Now) {
		retryAt = f.RetryAt
	}
	args := []any{named("id", f.ID[:]), named("tok", f.Token[:]), named("now", f.Now.UTC()),
		named("err", text(f.Error)), named("retry", retryAt.UTC()), named("park", f.Park)}
	query := s.q.fail
	switch {
	case headRow:
		query = s.q.failLane
		args = fenceArgs(args[:1:1], f.Lane, f.Lease)
		args = append(args, named("now", f.Now.UTC()), named("err", text(f.Error)), named("retry", retryAt.UTC()), named("park", f.Park))
	case f.Lane != outbox.Unordered:
		query = s.q.failFenced
		args = fenceArgs(args, f.Lane, f.Lease)
	}
	n, err := s.changed(ctx, query, args...)
	return n > 0, wrap("fail", err)
}

// Park moves one pending row without a live claim to parked, storing reason.
func (s *Store) Park(ctx context.Context, id outbox.ID, reason string, now time.Time) (bool, error) {
	n, err := s.changed(ctx, s.q.park, named("id", id[:]), named("reason", text(reason)), named("now", now.UTC()))
	return n > 0, wrap("park", err)
}

// Count returns the number of eligible rows across all lanes.
func (s *Store) Count(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := retry(ctx, func() error {
		return s.db.QueryRowContext(ctx, s.q.count, named("now", now.UTC())).Scan(&n)
	})
	if err != nil {
		return 0, wrap("count", err)
	}
	return n, nil
}

// Stats returns the eligible backlog per lane and the parked count, from one statement.
func (s *Store) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	rows, err := s.query(ctx, s.q.stats, named("now", now.UTC()))
	if err != nil {
		return outbox.Stats{}, wrap("stats", err)
	}
	var st outbox.Stats
	for rows.Next() {
		var (
			parked int64
			lane   sql.NullInt64
			count  int64
			oldest sql.NullTime
		)
		if err := rows.Scan(&parked, &lane, &count, &oldest); err != nil {
			rows.Close()
			return outbox.Stats{}, wrap("stats", err)
		}
		if parked == 1 {
			st.Parked = count
			continue
		}
		ls := outbox.LaneStats{Lane: outbox.Unordered, Eligible: count}
		if lane.Valid {
			ls.Lane = int(lane.Int64)
		}
		if oldest.Valid {
			ls.OldestEligible = oldest.Time.UTC()
		}
		st.Lanes = append(st.Lanes, ls)
	}
	if err := sqlrows.Close(rows); err != nil {
		return outbox.Stats{}, wrap("stats", err)
	}
	sort.Slice(st.Lanes, func(i, j int) bool { return st.Lanes[i].Lane < st.Lanes[j].Lane })
	return st, nil
}

// MaxLane returns the greatest lane in the table, or outbox.Unordered.
func (s *Store) MaxLane(ctx context.Context) (int, error) {
	if err := s.checkSeq(ctx); err != nil {
		return 0, wrap("max lane", err)
	}
	var lane sql.NullInt64
	err := retry(ctx, func() error { return s.db.QueryRowContext(ctx, s.q.maxLane).Scan(&lane) })
	if err != nil {
		return 0, wrap("max lane", s.schemaErr(err))
	}
	if !lane.Valid {
		return outbox.Unordered, nil
	}
	return int(lane.Int64), nil
}

// checkSeq fails with an error wrapping outbox.ErrSchemaOutdated when the rows table
// exists without the seq column (the schema before 2026-12-08): its lanes could not be
// read in commit order. CreateSchema and the forwarder's startup check (MaxLane) run it.
func (s *Store) checkSeq(ctx context.Context) error {
	var missing int
	if err := retry(ctx, func() error { return s.db.QueryRowContext(ctx, s.q.seqMissing).Scan(&missing) }); err != nil {
		return err
	}
	if missing == 1 {
		return fmt.Errorf("%w: table %s has no seq column (the schema before 2026-12-08), so its lanes could not follow commit order; "+
			"drain the outbox, stop its writers, drop the rows table and run CreateSchema (sqlserver/doc.go, Schema)", outbox.ErrSchemaOutdated, s.q.outbox)
	}
	return nil
}

// PendingLanes walks the lanes below Options.Lanes holding pending rows, one index seek per lane found.
func (s *Store) PendingLanes(ctx context.Context) ([]int, error) {
	var lanes []int
	for after := int32(-1); ; {
		var next sql.NullInt32
		err := retry(ctx, func() error {
			return s.db.QueryRowContext(ctx, s.q.nextPendingLane, named("after", after)).Scan(&next)
		})
		if err != nil {
			return nil, wrap("pending lanes", err)
		}
		if !next.Valid || int(next.Int32) >= s.opts.Lanes {
			return lanes, nil // the lanes above are out of range (MaxLane reports them)
		}
		lanes = append(lanes, int(next.Int32))
		after = next.Int32
	}
}

// ListParked returns up to q.Limit parked rows after q.After in id order.
func (s *Store) ListParked(ctx context.Context, q outbox.ParkedQuery) ([]outbox.Record, error) {
	if err := q.Validate(); err != nil {
		return nil, invalid(err)
	}
	maxBody := int64(math.MaxInt32) // varbinary(max)'s bound: the whole payload
	if q.MaxBody > 0 {
		maxBody = int64(q.MaxBody)
	}
	args := []any{named("n", int64(q.Limit)), named("after", q.After[:]), named("maxbody", maxBody)}
	query := s.q.parkedAny
	switch {
	case q.OrderingKey == nil:
	case *q.OrderingKey == "":
		query = s.q.parkedNullKey
	default:
		query = s.q.parkedKey
		args = append(args, named("key", text(*q.OrderingKey)))
	}
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, wrap("list parked", err)
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	var out []outbox.Record
	for rows.Next() {
		out = append(out, outbox.Record{})
		if err := sc.scanSized(rows, &out[len(out)-1]); err != nil {
			rows.Close()
			return nil, wrap("list parked", err)
		}
	}
	if err := sqlrows.Close(rows); err != nil {
		return nil, wrap("list parked", err)
	}
	return out, nil
}

// checkFilter enforces "exactly one selector" of a parked-row filter.
func checkFilter(f outbox.ParkedFilter) error {
	if err := f.Validate(); err != nil {
		return invalid(err)
	}
	return nil
}

// Requeue moves the selected parked rows back to pending, due at now, attempts reset.
func (s *Store) Requeue(ctx context.Context, f outbox.ParkedFilter) (int, error) {
	if err := checkFilter(f); err != nil {
		return 0, err
	}
	var n int
	var err error
	switch {
	case f.All:
		n, err = s.changed(ctx, s.q.requeueAll)
	case f.OrderingKey != nil && *f.OrderingKey == "":
		n, err = s.changed(ctx, s.q.requeueNullKey)
	case f.OrderingKey != nil:
		n, err = s.changed(ctx, s.q.requeueKey, named("key", text(*f.OrderingKey)))
	default:
		n, err = chunkIDs(f.IDs, func(part []outbox.ID) (int, error) {
			return s.changed(ctx, s.q.requeueIDs(len(part)), idArgs(nil, part)...)
		})
	}
	return n, wrap("requeue", err)
}

// Purge deletes the selected parked rows.
func (s *Store) Purge(ctx context.Context, f outbox.ParkedFilter) (int, error) {
	if err := checkFilter(f); err != nil {
		return 0, err
	}
	var n int
	var err error
	switch {
	case f.All:
		n, err = s.changed(ctx, s.q.purgeAll)
	case f.OrderingKey != nil && *f.OrderingKey == "":
		n, err = s.changed(ctx, s.q.purgeNullKey)
	case f.OrderingKey != nil:
		n, err = s.changed(ctx, s.q.purgeKey, named("key", text(*f.OrderingKey)))
	default:
		n, err = chunkIDs(f.IDs, func(part []outbox.ID) (int, error) {
			return s.changed(ctx, s.q.purgeIDs(len(part)), idArgs(nil, part)...)
		})
	}
	return n, wrap("purge", err)
}

func checkOwner(op, owner string) error {
	if err := outbox.ValidateOwner(op, owner, 0); err != nil {
		return invalid(err)
	}
	if n := utf16Len(owner); n > maxOwnerUnits {
		return invalidf(op, "Owner is %d UTF-16 code units long; at most %d fit", n, maxOwnerUnits)
	}
	return nil
}

func (s *Store) checkLease(op string, l outbox.LeaseParams) error {
	if err := l.Validate(s.opts.Lanes); err != nil {
		return invalid(err)
	}
	if n := utf16Len(l.Owner); n > maxOwnerUnits {
		return invalidf(op, "Owner is %d UTF-16 code units long; at most %d fit", n, maxOwnerUnits)
	}
	return nil
}

// AcquireLease takes lane for the caller when it is free, expired, or already the
// caller's (then it is extended, never shortened).
func (s *Store) AcquireLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := s.checkLease("acquire lease", l); err != nil {
		return false, err
	}
	n, err := s.changed(ctx, s.q.acquireLease, named("lane", int32(l.Lane)), named("owner", text(l.Owner)),
		named("tok", l.Token[:]), ttlArg(l.TTL))
	return n > 0, wrap("acquire lease", err)
}

// RenewLease extends a live lease held with l.Token; it never shortens it.
func (s *Store) RenewLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := s.checkLease("renew lease", l); err != nil {
		return false, err
	}
	n, err := s.changed(ctx, s.q.renewLease, named("lane", int32(l.Lane)), named("tok", l.Token[:]), ttlArg(l.TTL))
	return n > 0, wrap("renew lease", err)
}

// ReleaseLease deletes lane's lease when token holds it (live or not).
func (s *Store) ReleaseLease(ctx context.Context, lane int, token outbox.Token) (bool, error) {
	if err := outbox.ValidateLane("release lease", lane, s.opts.Lanes); err != nil {
		return false, invalid(err)
	}
	if token.IsZero() {
		return false, nil
	}
	n, err := s.changed(ctx, s.q.releaseLease, named("lane", int32(lane)), named("tok", token[:]))
	return n > 0, wrap("release lease", err)
}

// Leases lists every lease row, ordered by lane.
func (s *Store) Leases(ctx context.Context) ([]outbox.Lease, error) {
	rows, err := s.query(ctx, s.q.leases)
	if err != nil {
		return nil, wrap("leases", err)
	}
	out, err := sqlrows.Leases(rows)
	return out, wrap("leases", err)
}

// Heartbeat records that owner is alive until until.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := checkOwner("heartbeat", owner); err != nil {
		return err
	}
	if err := outbox.CheckTTL("heartbeat", ttl); err != nil {
		return invalid(err)
	}
	err := s.exec(ctx, s.q.heartbeat, named("owner", text(owner)), ttlArg(ttl))
	return wrap("heartbeat", err)
}

// Members lists the owners whose heartbeat is live at now, sorted bytewise (as Go sorts
// strings, whatever the server's collation).
func (s *Store) Members(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, s.q.members)
	if err != nil {
		return nil, wrap("members", err)
	}
	out, err := sqlrows.Strings(rows)
	if err != nil {
		return nil, wrap("members", err)
	}
	sort.Strings(out)
	return out, nil
}

// Leave removes owner's heartbeat.
func (s *Store) Leave(ctx context.Context, owner string) error {
	if err := checkOwner("leave", owner); err != nil {
		return err
	}
	err := s.exec(ctx, s.q.leave, named("owner", text(owner)))
	return wrap("leave", err)
}

// rowScanner holds the scan destinations of selectCols, reused across rows and calls.
type rowScanner struct {
	id, headers, body, token      sql.RawBytes
	uuid, transport, dest, status string
	key, typ, tenant, lastErr     sql.NullString
	lane                          sql.NullInt64
	seq                           int64
	created, deliver              time.Time
	expires                       sql.NullTime
	attempts                      int64
	dst                           []any
	sized                         []any // dst and the payload's length
	size                          int64
}

func (s *Store) scanner() *rowScanner {
	if sc, ok := s.scanners.Get().(*rowScanner); ok {
		return sc
	}
	sc := &rowScanner{}
	sc.dst = []any{&sc.id, &sc.uuid, &sc.lane, &sc.key, &sc.transport, &sc.dest, &sc.typ, &sc.headers, &sc.body,
		&sc.tenant, &sc.created, &sc.deliver, &sc.attempts, &sc.lastErr, &sc.status, &sc.token, &sc.expires, &sc.seq}
	sc.sized = append(sc.dst[:len(sc.dst):len(sc.dst)], &sc.size)
	return sc
}

// scanSized reads one row of the parked listing (selectCols, then the payload's
// length) into r, BodySize included.
func (sc *rowScanner) scanSized(rows *sql.Rows, r *outbox.Record) error {
	if err := rows.Scan(sc.sized...); err != nil {
		return err
	}
	sc.decode(r)
	r.BodySize = int(sc.size)
	return nil
}

// scan reads one row of selectCols into r, reusing r's Headers and Body storage. A row
// whose stored bytes cannot be decoded gets r.Corrupt; only driver errors fail.
func (sc *rowScanner) scan(rows *sql.Rows, r *outbox.Record) error {
	if err := rows.Scan(sc.dst...); err != nil {
		return err
	}
	sc.decode(r)
	return nil
}

// decode fills r from the scanned columns.
func (sc *rowScanner) decode(r *outbox.Record) {
	headers, body := r.Headers[:0], r.Body[:0]
	*r = outbox.Record{
		MessageUUID: sc.uuid,
		Seq:         sc.seq,
		Lane:        outbox.Unordered,
		OrderingKey: sc.key.String,
		Transport:   sc.transport,
		Destination: sc.dest,
		MessageType: sc.typ.String,
		Headers:     append(headers, sc.headers...),
		Body:        append(body, sc.body...),
		TenantID:    sc.tenant.String,
		CreatedAt:   sc.created.UTC(),
		DeliverAt:   sc.deliver.UTC(),
		Attempts:    int(sc.attempts),
		LastError:   sc.lastErr.String,
		Status:      outbox.Status(sc.status),
	}
	copy(r.ID[:], sc.id)
	if sc.lane.Valid {
		r.Lane = int(sc.lane.Int64)
	}
	if r.Body == nil {
		r.Body = []byte{}
	}
	if len(sc.token) == len(r.ClaimToken) && sc.expires.Valid {
		copy(r.ClaimToken[:], sc.token)
		r.ClaimExpiresAt = sc.expires.Time.UTC()
	}
	if err := headercodec.Validate(r.Headers); err != nil {
		r.Corrupt = &outbox.CorruptRowError{ID: r.ID, Column: "headers", Err: err}
	}
}
