package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/lanehead"
	"github.com/relayer-go/watermill-outbox/internal/lockedbatch"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
)

// Store is the PostgreSQL outbox.Store. It is safe for concurrent use; every method
// except Insert runs in autocommit on the *sql.DB it was built with.
type Store struct {
	db     *sql.DB
	opts   outbox.Options
	script string
	q      *queries

	batches lockedbatch.Dialect // LockBatch's batches

	inserts  sync.Pool // *insertBuf
	scanners sync.Pool // *rowScanner
}

var (
	_ outbox.Store            = (*Store)(nil)
	_ outbox.StaleConnChecker = (*Store)(nil)
)

// New returns a store over db, which must be opened with the pgx stdlib driver
// (sql.Open("pgx", dsn), stdlib.OpenDB, or OpenDB); a pool of another driver (lib/pq,
// an instrumenting wrapper) is refused with an error naming it, because the store
// reads pgx's errors (retryable failures, stale connections, missing tables) and sends
// pgx-encoded arrays. Invalid options give an error wrapping outbox.ErrInvalidOptions
// that names the field. New does no I/O: deploy the tables with CreateScript or
// Store.CreateSchema.
func New(db *sql.DB, opts outbox.Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("postgres: New: db is nil")
	}
	if err := checkDriver(db); err != nil {
		return nil, err
	}
	opts, err := validateOptions(opts)
	if err != nil {
		return nil, err
	}
	n := newNames(opts)
	s := &Store{db: db, opts: opts, script: createScript(n), q: newQueries(n, opts.Lanes)}
	s.batches = lockedbatch.Dialect{Name: "postgres", Wrap: wrap, Finish: s.finishBatch}
	return s, nil
}

// Options returns the validated options with defaults.
func (s *Store) Options() outbox.Options { return s.opts }

// DB returns the database the store runs its statements on.
func (s *Store) DB() *sql.DB { return s.db }

// schemaLockKey serialises concurrent CreateSchema calls of any outbox in one database:
// concurrent CREATE ... IF NOT EXISTS of the same name can fail on the catalog's unique
// indexes.
const schemaLockKey int64 = 0x6f7574626f78 // "outbox"

// CreateSchema runs CreateScript's DDL in one transaction.
func (s *Store) CreateSchema(ctx context.Context) error {
	if err := s.checkSeq(ctx); err != nil { // an existing table of an earlier schema
		return wrap("create schema", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("create schema", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", schemaLockKey); err != nil {
		return wrap("create schema", err)
	}
	if _, err := tx.ExecContext(ctx, s.script); err != nil {
		return wrap("create schema", err)
	}
	return wrap("create schema", tx.Commit())
}

// invalid wraps a parameter error of the root package's checks (outbox.ErrInvalidArgument).
func invalid(err error) error { return fmt.Errorf("postgres: %w", err) }

// noLease reports an ordered operation without a lease token: no lease row can hold the
// zero token (CHECK), so it is a lease that is not live: nothing changes, no error.
func noLease(lane int, lease outbox.Token) bool {
	return lane != outbox.Unordered && lease.IsZero()
}

// Read returns up to len(dst) eligible rows of q.Lane after q.After, in id order.
func (s *Store) Read(ctx context.Context, q outbox.ReadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	if err := q.Validate(s.opts.Lanes); err != nil {
		return dst[:0], invalid(err)
	}
	if len(dst) == 0 {
		return dst, ctx.Err()
	}
	var rows *sql.Rows
	var err error
	if q.Lane == outbox.Unordered {
		rows, err = s.db.QueryContext(ctx, s.q.readUnordered, q.After[:], q.Now, len(dst))
	} else {
		rows, err = s.db.QueryContext(ctx, s.q.readLane, q.Lane, q.After[:], q.Now, len(dst))
	}
	if err != nil {
		return dst[:0], wrap("read", err)
	}
	n := 0
	sc := s.scanner()
	defer s.scanners.Put(sc)
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

// Head returns the head run of lane q.Lane without locking or writing (see
// outbox.Store): pages of the lane's pending rows in id order, cut at the first row
// that is not due or holds a live claim; rows of parked keys are passed over.
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
		return s.scanPage(ctx, dst, limit, s.q.laneRun, q.Lane, after, limit)
	})
	return out, wrap("head", err)
}

// scanPage appends up to limit rows of query to dst, reusing dst's storage.
func (s *Store) scanPage(ctx context.Context, dst []outbox.Record, limit int, query string, args ...any) ([]outbox.Record, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return dst, err
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	return sqlrows.Append(rows, dst, limit, sc.scan)
}

// parkedKeys returns, per ordering key of lane, the smallest Seq of its parked rows.
func (s *Store) parkedKeys(ctx context.Context, lane int) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q.parkedKeys, lane)
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
		m[key] = seq
	}
	return m, rows.Err()
}

// Claim takes up to c.Limit eligible rows for c.Token in one statement.
func (s *Store) Claim(ctx context.Context, c outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	dst = dst[:0]
	if err := c.Validate(s.opts.Lanes); err != nil {
		return dst, invalid(err)
	}
	if noLease(c.Lane, c.Lease) {
		return dst, nil
	}
	var rows *sql.Rows
	var err error
	switch {
	case c.Lane == outbox.Unordered:
		rows, err = s.db.QueryContext(ctx, s.q.claimUnordered, c.Token[:], c.Until, c.Now, c.Limit, c.After[:])
	case c.HoldParkedKeys:
		rows, err = s.db.QueryContext(ctx, s.q.claimLaneHold, c.Token[:], c.Until, c.Now, c.Limit, c.Lane, c.Lease[:])
	default:
		rows, err = s.db.QueryContext(ctx, s.q.claimLane, c.Token[:], c.Until, c.Now, c.Limit, c.Lane, c.Lease[:])
	}
	if err != nil {
		return dst, wrap("claim", err)
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	for rows.Next() {
		dst = grow(dst)
		if err := sc.scan(rows, &dst[len(dst)-1]); err != nil {
			rows.Close()
			// The claim may have committed; its rows come back when the claim expires.
			return dst[:0], wrap("claim", err)
		}
	}
	if err := sqlrows.Close(rows); err != nil {
		return dst[:0], wrap("claim", err)
	}
	// RETURNING has no order: a lane's rows go in lane order, unordered rows by id.
	if c.Lane != outbox.Unordered {
		slices.SortFunc(dst, func(a, b outbox.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	} else {
		slices.SortFunc(dst, func(a, b outbox.Record) int { return a.ID.Compare(b.ID) })
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

// idArgs returns ids as a bytea[] argument (the slices alias ids).
func idArgs(ids []outbox.ID) [][]byte {
	out := make([][]byte, len(ids))
	for i := range ids {
		out[i] = ids[i][:]
	}
	return out
}

// Renew extends the live claims of r.Token; it never shortens an expiry.
func (s *Store) Renew(ctx context.Context, r outbox.RenewParams) (int, error) {
	if err := r.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	if r.Token.IsZero() || noLease(r.Lane, r.Lease) {
		return 0, nil
	}
	args := make([]any, 3, 6)
	args[0], args[1], args[2] = r.Token[:], r.Now, r.Until
	v := 0
	if r.IDs != nil {
		if len(r.IDs) == 0 {
			return 0, nil
		}
		v |= 1
		args = append(args, idArgs(r.IDs))
	}
	if r.Lane != outbox.Unordered {
		v |= 2
		args = append(args, r.Lane, r.Lease[:])
	}
	return s.execCount(ctx, "renew", s.q.renew[v], args...)
}

// Release gives back the live claims of r.Token without counting an attempt.
func (s *Store) Release(ctx context.Context, r outbox.ReleaseParams) (int, error) {
	if err := r.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	if r.Token.IsZero() || noLease(r.Lane, r.Lease) {
		return 0, nil
	}
	args := make([]any, 2, 5)
	args[0], args[1] = r.Token[:], r.Now
	v := 0
	if r.IDs != nil {
		if len(r.IDs) == 0 {
			return 0, nil
		}
		v |= 1
		args = append(args, idArgs(r.IDs))
	}
	if r.Lane != outbox.Unordered {
		v |= 2
		args = append(args, r.Lane, r.Lease[:])
	}
	return s.execCount(ctx, "release", s.q.release[v], args...)
}

func (s *Store) execCount(ctx context.Context, op, query string, args ...any) (int, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, wrap(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, wrap(op, err)
	}
	return int(n), nil
}

// Complete deletes the rows among c.IDs whose live claim is c.Token.
func (s *Store) Complete(ctx context.Context, c outbox.CompleteParams) (int, error) {
	if err := c.Validate(s.opts.Lanes); err != nil {
		return 0, invalid(err)
	}
	if len(c.IDs) == 0 || noLease(c.Lane, c.Lease) || (c.Token.IsZero() && c.Lane == outbox.Unordered) {
		return 0, nil
	}
	if c.Token.IsZero() { // a lane run read with Head: fenced by the lease alone
		return s.execCount(ctx, "complete", s.q.completeLane, idArgs(c.IDs), c.Lane, c.Lease[:])
	}
	if c.Lane == outbox.Unordered {
		return s.execCount(ctx, "complete", s.q.complete[0], c.Token[:], c.Now, idArgs(c.IDs))
	}
	return s.execCount(ctx, "complete", s.q.complete[1], c.Token[:], c.Now, idArgs(c.IDs), c.Lane, c.Lease[:])
}

// Fail records a failed attempt of one row held with f.Token, in one statement.
func (s *Store) Fail(ctx context.Context, f outbox.FailParams) (bool, error) {
	if err := f.Validate(s.opts.Lanes); err != nil {
		return false, invalid(err)
	}
	if noLease(f.Lane, f.Lease) || (f.Token.IsZero() && f.Lane == outbox.Unordered) {
		return false, nil
	}
	var retry any // NULL keeps deliver_at
	if f.RetryAt.After(f.Now) {
		retry = f.RetryAt
	}
	var n int
	var err error
	switch {
	case f.Token.IsZero(): // a head row read with Head: fenced by the lease alone
		n, err = s.execCount(ctx, "fail", s.q.failLane, f.ID[:], storableText(f.Error), retry, f.Park, f.Lane, f.Lease[:])
	case f.Lane == outbox.Unordered:
		n, err = s.execCount(ctx, "fail", s.q.fail[0], f.ID[:], f.Token[:], f.Now, storableText(f.Error), retry, f.Park)
	default:
		n, err = s.execCount(ctx, "fail", s.q.fail[1], f.ID[:], f.Token[:], f.Now, storableText(f.Error), retry, f.Park, f.Lane, f.Lease[:])
	}
	return n > 0, err
}

// storableText makes free text (error messages from any library) storable in a text
// column: PostgreSQL rejects NUL and invalid UTF-8, and losing the failure record over
// its message would be worse than a replaced character.
func storableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Park moves one row without a live claim to parked, storing reason.
func (s *Store) Park(ctx context.Context, id outbox.ID, reason string, now time.Time) (bool, error) {
	n, err := s.execCount(ctx, "park", s.q.park, id[:], storableText(reason), now)
	return n > 0, err
}

// Count returns the number of eligible rows across all lanes.
func (s *Store) Count(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.q.count, now).Scan(&n); err != nil {
		return 0, wrap("count", err)
	}
	return n, nil
}

// Stats returns the eligible backlog per lane and the parked count, from one snapshot.
func (s *Store) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	rows, err := s.db.QueryContext(ctx, s.q.stats, now)
	if err != nil {
		return outbox.Stats{}, wrap("stats", err)
	}
	var st outbox.Stats
	for rows.Next() {
		var (
			parked bool
			lane   sql.NullInt64
			count  int64
			oldest sql.NullTime
		)
		if err := rows.Scan(&parked, &lane, &count, &oldest); err != nil {
			rows.Close()
			return outbox.Stats{}, wrap("stats", err)
		}
		if parked {
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
	slices.SortFunc(st.Lanes, func(a, b outbox.LaneStats) int { return a.Lane - b.Lane })
	return st, nil
}

// MaxLane returns the greatest lane value in the table, or outbox.Unordered.
func (s *Store) MaxLane(ctx context.Context) (int, error) {
	if err := s.checkSeq(ctx); err != nil {
		return 0, wrap("max lane", err)
	}
	var lane sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.maxLane).Scan(&lane); err != nil {
		return 0, wrap("max lane", s.schemaErr(err))
	}
	if !lane.Valid {
		return outbox.Unordered, nil
	}
	return int(lane.Int64), nil
}

// PendingLanes lists the lanes holding pending rows: one index probe per lane of Options.Lanes.
func (s *Store) PendingLanes(ctx context.Context) ([]int, error) {
	rows, err := s.db.QueryContext(ctx, s.q.pendingLanes)
	if err != nil {
		return nil, wrap("pending lanes", err)
	}
	var lanes []int
	for rows.Next() {
		var lane int
		if err := rows.Scan(&lane); err != nil {
			rows.Close()
			return nil, wrap("pending lanes", err)
		}
		lanes = append(lanes, lane)
	}
	if err := sqlrows.Close(rows); err != nil {
		return nil, wrap("pending lanes", err)
	}
	return lanes, nil
}

// ListParked returns up to q.Limit parked rows after q.After in id order.
func (s *Store) ListParked(ctx context.Context, q outbox.ParkedQuery) ([]outbox.Record, error) {
	if err := q.Validate(); err != nil {
		return nil, invalid(err)
	}
	var rows *sql.Rows
	var err error
	maxBody := math.MaxInt32 // bytea's bound: the whole payload
	if q.MaxBody > 0 {
		maxBody = q.MaxBody
	}
	switch {
	case q.OrderingKey == nil:
		rows, err = s.db.QueryContext(ctx, s.q.parked[keyAny], q.After[:], q.Limit, maxBody)
	case *q.OrderingKey == "":
		rows, err = s.db.QueryContext(ctx, s.q.parked[keyNull], q.After[:], q.Limit, maxBody)
	default:
		rows, err = s.db.QueryContext(ctx, s.q.parked[keyOne], q.After[:], q.Limit, *q.OrderingKey, maxBody)
	}
	if err != nil {
		return nil, wrap("list parked", err)
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	var out []outbox.Record
	for rows.Next() {
		out = append(out, outbox.Record{})
		r := &out[len(out)-1]
		var size int64
		if err := sc.scanCounted(rows, r, &size); err != nil {
			rows.Close()
			return nil, wrap("list parked", err)
		}
		r.BodySize = int(size)
	}
	if err := sqlrows.Close(rows); err != nil {
		return nil, wrap("list parked", err)
	}
	return out, nil
}

// filter returns the variant and argument of a parked-row filter: exactly one selector.
func parkedFilter(op string, f outbox.ParkedFilter) (variant int, arg any, all bool, err error) {
	if err := f.Validate(); err != nil {
		return 0, nil, false, invalid(err)
	}
	switch {
	case f.All:
		return 0, nil, true, nil
	case f.IDs != nil:
		return keyAny, idArgs(f.IDs), false, nil
	case *f.OrderingKey == "":
		return keyNull, nil, false, nil
	default:
		return keyOne, *f.OrderingKey, false, nil
	}
}

// Requeue moves the selected parked rows back to pending, due at now, attempts reset.
func (s *Store) Requeue(ctx context.Context, f outbox.ParkedFilter) (int, error) {
	v, arg, all, err := parkedFilter("requeue", f)
	switch {
	case err != nil:
		return 0, err
	case all:
		return s.execCount(ctx, "requeue", s.q.requeueA)
	case v == keyNull:
		return s.execCount(ctx, "requeue", s.q.requeue[v])
	default:
		return s.execCount(ctx, "requeue", s.q.requeue[v], arg)
	}
}

// Purge deletes the selected parked rows.
func (s *Store) Purge(ctx context.Context, f outbox.ParkedFilter) (int, error) {
	v, arg, all, err := parkedFilter("purge", f)
	switch {
	case err != nil:
		return 0, err
	case all:
		return s.execCount(ctx, "purge", s.q.purgeA)
	case v == keyNull:
		return s.execCount(ctx, "purge", s.q.purge[v])
	default:
		return s.execCount(ctx, "purge", s.q.purge[v], arg)
	}
}

func (s *Store) checkLease(l outbox.LeaseParams) error {
	if err := l.Validate(s.opts.Lanes); err != nil {
		return invalid(err)
	}
	return nil
}

// AcquireLease takes lane for the caller when it is free, expired, or already the
// caller's (then it is extended).
func (s *Store) AcquireLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := s.checkLease(l); err != nil {
		return false, err
	}
	n, err := s.execCount(ctx, "acquire lease", s.q.acquireLease, l.Lane, storableText(l.Owner), l.Token[:], l.TTL.Microseconds())
	return n > 0, err
}

// RenewLease extends a live lease held with l.Token; it never shortens it.
func (s *Store) RenewLease(ctx context.Context, l outbox.LeaseParams) (bool, error) {
	if err := s.checkLease(l); err != nil {
		return false, err
	}
	n, err := s.execCount(ctx, "renew lease", s.q.renewLease, l.Lane, l.Token[:], l.TTL.Microseconds())
	return n > 0, err
}

// ReleaseLease deletes the lease of lane held with token, live or not.
func (s *Store) ReleaseLease(ctx context.Context, lane int, token outbox.Token) (bool, error) {
	if err := outbox.ValidateLane("release lease", lane, s.opts.Lanes); err != nil {
		return false, invalid(err)
	}
	if token.IsZero() {
		return false, nil
	}
	n, err := s.execCount(ctx, "release lease", s.q.releaseLease, lane, token[:])
	return n > 0, err
}

// Leases lists every lease row ordered by lane.
func (s *Store) Leases(ctx context.Context) ([]outbox.Lease, error) {
	rows, err := s.db.QueryContext(ctx, s.q.leases)
	if err != nil {
		return nil, wrap("leases", err)
	}
	out, err := sqlrows.Leases(rows)
	return out, wrap("leases", err)
}

func checkOwner(op, owner string) error {
	if err := outbox.ValidateOwner(op, owner, 0); err != nil {
		return invalid(err)
	}
	return nil
}

// Heartbeat records that owner is alive for ttl on the server's clock.
func (s *Store) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := checkOwner("heartbeat", owner); err != nil {
		return err
	}
	if err := outbox.CheckTTL("heartbeat", ttl); err != nil {
		return invalid(err)
	}
	_, err := s.db.ExecContext(ctx, s.q.heartbeat, owner, ttl.Microseconds())
	return wrap("heartbeat", err)
}

// Members lists the owners whose heartbeat is live on the server's clock, sorted
// bytewise.
func (s *Store) Members(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q.members)
	if err != nil {
		return nil, wrap("members", err)
	}
	out, err := sqlrows.Strings(rows)
	return out, wrap("members", err)
}

// Leave removes owner's heartbeat.
func (s *Store) Leave(ctx context.Context, owner string) error {
	if err := checkOwner("leave", owner); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, s.q.leave, owner)
	return wrap("leave", err)
}

// rowScanner holds the scan destinations of selectColumns, reused across rows and calls.
type rowScanner struct {
	id, headers, body, token                             sql.RawBytes
	uuid, key, transport, dest, typ, tenant, lastErr, st sql.NullString
	lane, seq                                            sql.NullInt64
	created, deliver, expires                            sql.NullTime
	attempts                                             int64
	dst                                                  []any
	counted                                              []any // dst and one count column
	count                                                int64
}

func (s *Store) scanner() *rowScanner {
	if sc, ok := s.scanners.Get().(*rowScanner); ok {
		return sc
	}
	sc := &rowScanner{}
	sc.dst = []any{&sc.id, &sc.uuid, &sc.lane, &sc.key, &sc.transport, &sc.dest, &sc.typ, &sc.headers, &sc.body,
		&sc.tenant, &sc.created, &sc.deliver, &sc.attempts, &sc.lastErr, &sc.st, &sc.token, &sc.expires, &sc.seq}
	sc.counted = append(sc.dst[:len(sc.dst):len(sc.dst)], &sc.count)
	return sc
}

// scanCounted reads one row of selectColumns followed by a count column into r and n.
func (sc *rowScanner) scanCounted(rows *sql.Rows, r *outbox.Record, n *int64) error {
	if err := rows.Scan(sc.counted...); err != nil {
		return err
	}
	*n = sc.count
	sc.decode(r)
	return nil
}

// scan reads one row of selectColumns into r, reusing r's Headers and Body storage. A
// row whose stored bytes cannot be decoded gets r.Corrupt; only driver errors fail.
func (sc *rowScanner) scan(rows *sql.Rows, r *outbox.Record) error {
	if err := rows.Scan(sc.dst...); err != nil {
		return err
	}
	sc.decode(r)
	return nil
}

// decode fills r from the scanned columns.
func (sc *rowScanner) decode(r *outbox.Record) {
	var corrupt error
	r.ID = outbox.ID{}
	if copy(r.ID[:], sc.id); len(sc.id) != len(r.ID) {
		corrupt = fmt.Errorf("id is %d bytes, want 16", len(sc.id))
	}
	r.MessageUUID = sc.uuid.String
	r.Lane = outbox.Unordered
	if sc.lane.Valid {
		r.Lane = int(sc.lane.Int64)
	}
	r.Seq = sc.seq.Int64
	r.OrderingKey = sc.key.String
	r.Transport = sc.transport.String
	r.Destination = sc.dest.String
	r.MessageType = sc.typ.String
	sqlrows.CopyBytes(r, sc.headers, sc.body)
	r.BodySize = 0
	r.TenantID = sc.tenant.String
	r.CreatedAt = sc.created.Time.UTC()
	r.DeliverAt = r.CreatedAt // NULL: deliver_at = created_at
	if sc.deliver.Valid {
		r.DeliverAt = sc.deliver.Time.UTC()
	}
	r.Attempts = int(sc.attempts)
	r.LastError = sc.lastErr.String
	switch {
	case !sc.st.Valid: // NULL: pending
		r.Status = outbox.StatusPending
	case sc.st.String == string(outbox.StatusParked):
		r.Status = outbox.StatusParked
	default:
		r.Status = outbox.Status(sc.st.String)
	}
	r.ClaimToken = outbox.Token{}
	copy(r.ClaimToken[:], sc.token)
	r.ClaimExpiresAt = time.Time{}
	if sc.expires.Valid {
		r.ClaimExpiresAt = sc.expires.Time.UTC()
	}
	r.Corrupt = nil
	if corrupt != nil {
		r.Corrupt = &outbox.CorruptRowError{ID: r.ID, Column: "id", Err: corrupt}
	} else if err := headercodec.Validate(r.Headers); err != nil {
		r.Corrupt = &outbox.CorruptRowError{ID: r.ID, Column: "headers", Err: err}
	}
}
