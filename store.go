package outbox

import (
	"context"
	"database/sql"
	"time"
)

// Store is the contract every SQL dialect implements over one outbox table (and its
// lane-lease table). Package outboxtest runs the whole contract against a Store.
//
// For implementers (a dialect of your own): Store, the optional capabilities
// (BatchLocker, StaleConnChecker, Inbox) and their parameter types are the driver seam,
// and they are not yet stable. Until v1, a minor version may add a method or a field;
// the CHANGELOG names every such change, and outboxtest gains a rule for it in the same
// version, so an implementation that passes outboxtest.Run of the version it builds
// against is complete. What is stable already: the rules below, the row layout and its
// wire formats (lanes, headercodec), which writers in other languages rely on.
// Applications use the stores through publisher and forwarder and never need to call
// these methods directly.
//
// Rules common to every method:
//   - Every instant of a row (due times, claim expiries) is supplied by the caller. Lane
//     leases and heartbeats are the exception: their expiries are set and compared on
//     the database's clock (the caller gives a TTL), so that forwarders whose clocks
//     disagree still agree on who holds a lane. Instants are stored in UTC at
//     microsecond precision or better and returned in UTC.
//   - Eligible means: status pending, DeliverAt <= now, and no live claim (a claim whose
//     expiry is <= now has expired).
//   - Every method except Insert runs on its own pooled connection in autocommit, never in
//     a caller's transaction; when it returns nil the change is durable.
//   - Database errors and cancellation propagate (transient ones wrapped in
//     *RetryableError); they never turn into "no rows" or a zero count. A cancelled
//     mutation may nevertheless have been committed.
//   - Mutations report how many rows they changed; a stale or expired token changes
//     nothing and reports 0 or false, with a nil error.
//   - Ordered (lane) operations take the caller's lane-lease token and change nothing
//     unless that lease is live on the database's clock when the statement runs
//     (fencing across forwarders).
type Store interface {
	// Options returns the validated options (with defaults) the store was built with.
	Options() Options

	// DB returns the database the store runs its statements on; writers begin their
	// transactions there unless told otherwise.
	DB() *sql.DB

	// CreateSchema runs the dialect's idempotent DDL (the same as its CreateScript). It
	// never alters an existing table; one it can tell predates the current schema is an
	// error wrapping ErrSchemaOutdated.
	CreateSchema(ctx context.Context) error

	// Insert writes records inside the caller's transaction, in bulk. Zero DeliverAt means
	// CreatedAt. Status, attempts, error and claim fields are ignored: rows start pending.
	// An invalid record (zero ID, lane outside [Unordered, Lanes)) fails the whole call
	// before anything is written; a database failure part way leaves the transaction to
	// be rolled back by the caller.
	Insert(ctx context.Context, tx *sql.Tx, records []Record) error

	// Read returns up to len(dst) eligible rows of one lane (or unordered rows when
	// q.Lane is Unordered) with ID > q.After, in ID order, reusing dst's storage; it never
	// returns more rows than len(dst).
	Read(ctx context.Context, q ReadQuery, dst []Record) ([]Record, error)

	// Head returns the head run of lane q.Lane without changing anything: up to q.Limit
	// pending rows in ID order (appended to dst[:0]), ending before the first row that
	// is not due at q.Now or holds a live claim (such a row holds the whole lane). With
	// q.HoldParkedKeys a row whose ordering key has a parked row with a smaller ID in the
	// lane is passed over (neither returned nor holding the lane), so the other keys
	// flow on. A lane worker under a live lease reads its lane this way instead of
	// claiming rows: the lease already makes it the lane's only sender, and it deletes
	// the sent run with one fenced Complete.
	Head(ctx context.Context, q HeadQuery, dst []Record) ([]Record, error)

	// Claim atomically takes up to c.Limit eligible rows for c.Token until c.Until,
	// skipping rows another claimer holds or has locked, and returns them in ID order
	// (appended to dst[:0]). Two claimers never get the same row.
	//
	// Unordered (c.Lane == Unordered): any eligible unordered rows.
	// Ordered: only the head of the lane: the leading run, in ID order, of pending rows
	// that are eligible. A head row that is not due or holds another live claim holds the
	// whole lane (nothing is returned). Requires c.Lease to be the live lease of c.Lane.
	// (The forwarder no longer claims lane rows: it reads them with Head under its lease.
	// Ordered claims, renewals and releases stay in the contract for other consumers of
	// a lane until v1; a release may drop them.)
	Claim(ctx context.Context, c ClaimParams, dst []Record) ([]Record, error)

	// Renew extends to until the live claims held by token (all of them, or only ids when
	// given); it never shortens an expiry. It returns how many live claims it found,
	// including those whose expiry did not change. An expired or unknown token finds 0.
	Renew(ctx context.Context, r RenewParams) (int, error)

	// Complete deletes the rows among ids whose live claim is token (a delivered row is
	// deleted), and returns how many it deleted. With a lane and a zero Token it deletes
	// the pending rows of that lane among ids, fenced by the lease alone (a lane run read
	// with Head and sent under the lease).
	Complete(ctx context.Context, c CompleteParams) (int, error)

	// Release gives back the live claims held by token (all of them, or only ids when
	// given) without counting an attempt, so the rows are claimable again at once (a
	// forwarder shutting down, or a lane worker stopping with claimed rows it did not
	// send). It returns how many claims it released; a stale token releases nothing.
	Release(ctx context.Context, r ReleaseParams) (int, error)

	// Fail records a failed attempt of one row in one statement: with the row's live
	// claim token it increments attempts, stores the error text, releases the claim, sets
	// DeliverAt to RetryAt when RetryAt is after now, and parks the row when Park is set.
	// It reports whether the row was changed; repeating it with the released token changes
	// nothing. With a lane and a zero Token it changes the pending row of that lane,
	// fenced by the lease alone (a head row read with Head).
	Fail(ctx context.Context, f FailParams) (bool, error)

	// Park moves one row to parked without a claim (for example a row that cannot be
	// decoded), storing reason. A row with another live claim is not changed.
	Park(ctx context.Context, id ID, reason string, now time.Time) (bool, error)

	// Count returns the number of eligible rows across all lanes.
	Count(ctx context.Context, now time.Time) (int64, error)

	// Stats returns, per lane with eligible rows (Unordered included), the eligible count
	// and the oldest eligible row's DeliverAt, plus the parked count. A store may also list
	// a lane whose pending rows are not eligible, with a zero count; the eligible counts
	// always add up to Count.
	Stats(ctx context.Context, now time.Time) (Stats, error)

	// MaxLane returns the greatest lane value present in the table (pending or parked),
	// or Unordered when no row has a lane.
	MaxLane(ctx context.Context) (int, error)

	// PendingLanes returns, in ascending order, the lanes that hold at least one pending
	// row, eligible or not (parked rows do not count). It is a cheap probe (an index dive
	// per lane or per non-empty lane, never a scan of the rows) that lets a forwarder
	// leave empty lanes alone instead of polling each of them. Only lanes below the
	// store's Options.Lanes are listed: rows in lanes at or above it (a table written
	// with more lanes, which forwarder.CheckLanes refuses; MaxLane reports them) are not.
	PendingLanes(ctx context.Context) ([]int, error)

	// ListParked returns up to q.Limit parked rows with ID > q.After in ID order,
	// optionally only those of one ordering key ("" selects the rows without one).
	ListParked(ctx context.Context, q ParkedQuery) ([]Record, error)
	// Requeue moves the parked rows the filter selects back to pending, due at the
	// database's now (never a caller's clock: a requeued row may head its lane, and a
	// clock running ahead would hold the lane), with attempts reset to 0; it returns how
	// many moved. ListParked with the same key (OrderingKey "" = the unordered rows, whose
	// key is NULL), Requeue and Purge select the same rows.
	Requeue(ctx context.Context, f ParkedFilter) (int, error)
	// Purge deletes the parked rows the filter selects and returns how many.
	Purge(ctx context.Context, f ParkedFilter) (int, error)

	// AcquireLease takes lane for owner with token for l.TTL from the database's now,
	// when the lane has no lease or its lease has expired on the database's clock (a
	// takeover replaces the token). It reports whether the caller now holds the lease.
	// Acquiring a lane the same token already holds extends it.
	AcquireLease(ctx context.Context, l LeaseParams) (bool, error)
	// RenewLease extends a live lease held with token to the database's now plus l.TTL;
	// never shortens it.
	RenewLease(ctx context.Context, l LeaseParams) (bool, error)
	// ReleaseLease gives up a lease held with token (live or not) so another forwarder can
	// take it at once.
	ReleaseLease(ctx context.Context, lane int, token Token) (bool, error)
	// Leases lists every lease row (live or expired, as Lease.Live says on the
	// database's clock), ordered by lane.
	Leases(ctx context.Context) ([]Lease, error)

	// Heartbeat records in the members table that owner (one forwarder instance) is alive
	// for ttl from the database's now; forwarders share lanes among the live members.
	Heartbeat(ctx context.Context, owner string, ttl time.Duration) error
	// Members lists the owners whose heartbeat is live on the database's clock, sorted.
	Members(ctx context.Context) ([]string, error)
	// Leave removes owner's heartbeat (graceful shutdown).
	Leave(ctx context.Context, owner string) error
}

// StaleConnChecker is implemented by stores whose driver reports a pooled connection
// that the server closed while it sat idle (PostgreSQL's 57P01 "terminating connection
// due to administrator command") as an error of the next statement instead of
// database/sql's driver.ErrBadConn. IsStaleConn reports whether err, returned by a
// BEGIN, is such a failure: nothing was done, and the caller may take another
// connection.
type StaleConnChecker interface {
	IsStaleConn(err error) bool
}

// ReadQuery selects rows for Store.Read.
type ReadQuery struct {
	Lane  int // Unordered or a lane number
	After ID  // exclusive cursor; the zero ID reads from the start
	Now   time.Time
}

// HeadQuery selects the head run of a lane for Store.Head.
type HeadQuery struct {
	Lane  int // a lane number (not Unordered)
	Limit int
	Now   time.Time
	// HoldParkedKeys: rows of an ordering key with an earlier parked row in the lane are
	// passed over (see Store.Head).
	HoldParkedKeys bool
}

// ClaimParams parameterises Store.Claim.
type ClaimParams struct {
	Lane  int // Unordered or a lane number
	Limit int
	Now   time.Time
	Until time.Time // expiry of the new claim; must be after Now
	Token Token     // fresh, non-zero
	Lease Token     // the caller's live lease on Lane; required when Lane != Unordered

	// After (unordered only) is an exclusive ID cursor: only rows with a greater ID are
	// claimed; the zero ID claims from the start. A claimer walking a large backlog passes
	// the last ID of its previous full batch, so that the database does not step again
	// over the rows it has just claimed or deleted (MariaDB's locking reads crawl over
	// deleted rows not purged yet); rows behind the cursor (retries, late commits,
	// expired claims) are found by its next claim from the start. A non-zero After with
	// a lane is an error: a lane is always read from its head.
	After ID

	// HoldParkedKeys (ordered only): a row whose ordering key has a parked row with a
	// smaller ID in the same lane is held; it neither is claimed nor holds the lane, so
	// other keys of the lane flow on ("park the key").
	HoldParkedKeys bool
}

// RenewParams parameterises Store.Renew.
//
// Lane, here and in CompleteParams, ReleaseParams and FailParams, is the lane of the
// rows named (Unordered for unordered rows), never another: a store may find rows by
// (lane, id), as the MySQL store, keyed that way, does, and leave rows of another lane
// unchanged. A claim is taken within one lane (ClaimParams.Lane), which is the one to
// pass.
type RenewParams struct {
	Token Token
	IDs   []ID // optional: only these rows
	Now   time.Time
	Until time.Time
	Lane  int   // the rows' lane (Unordered for unordered rows), whose lease must be live (see above)
	Lease Token // required when Lane != Unordered
}

// CompleteParams parameterises Store.Complete.
type CompleteParams struct {
	Token Token // the rows' claim; zero for a lane run read with Head (Lane and Lease set)
	IDs   []ID
	// Seqs, optional, are the rows' Record.Seq as a read returned them, one per ID in the
	// same order. A store keyed by lane order (MySQL) finds a lane's rows by them instead
	// of walking the lane; a row is changed only when its ID matches too. Ignored for
	// unordered rows.
	Seqs  []int64
	Now   time.Time
	Lane  int   // the rows' lane (Unordered for unordered rows), whose lease must be live (see RenewParams)
	Lease Token // required when Lane != Unordered
}

// ReleaseParams parameterises Store.Release.
type ReleaseParams struct {
	Token Token
	IDs   []ID // optional: only these rows
	Now   time.Time
	Lane  int   // the rows' lane (Unordered for unordered rows), whose lease must be live (see RenewParams)
	Lease Token // required when Lane != Unordered
}

// FailParams parameterises Store.Fail.
type FailParams struct {
	ID      ID
	Seq     int64 // optional: the row's Record.Seq as read (see CompleteParams.Seqs)
	Token   Token // the row's claim; zero for a head row read with Head (Lane and Lease set)
	Now     time.Time
	Error   string
	RetryAt time.Time // when after Now, the row becomes due again only then
	Park    bool
	Lane    int   // the row's lane (Unordered for an unordered row), whose lease must be live (see RenewParams)
	Lease   Token // required when Lane != Unordered
}

// ParkedQuery pages through parked rows.
type ParkedQuery struct {
	After       ID
	Limit       int
	OrderingKey *string // nil = any key; "" = the rows without a key
	// MaxBody, when positive, bounds the payload bytes read per row: Body holds the
	// payload's first MaxBody bytes (the rest never leaves the database), and
	// Record.BodySize its whole length. 0 reads whole payloads.
	MaxBody int
}

// ParkedFilter selects parked rows for Requeue and Purge: the rows listed in IDs, or
// all rows of OrderingKey, or every parked row when All is set. Exactly one selector
// must be given.
type ParkedFilter struct {
	IDs         []ID
	OrderingKey *string
	All         bool
}

// LeaseParams parameterises AcquireLease and RenewLease.
type LeaseParams struct {
	Lane  int
	Owner string // free text naming the holder (host/process), for operators
	Token Token
	// TTL is how long the lease lasts from the database's now when the statement runs
	// (at least a millisecond, at most MaxTTL).
	TTL time.Duration
}

// MaxTTL bounds the TTL of leases and heartbeats.
const MaxTTL = 24 * time.Hour

// Lease is one row of the lane-lease table.
type Lease struct {
	Lane      int
	Owner     string
	Token     Token
	ExpiresAt time.Time // on the database's clock
	Live      bool      // ExpiresAt is after the database's now
}

// LaneStats is the backlog of one lane (or of unordered rows, Lane == Unordered).
type LaneStats struct {
	Lane           int
	Eligible       int64
	OldestEligible time.Time // DeliverAt of the oldest eligible row; zero when none
}

// Stats is a backlog snapshot for metrics.
type Stats struct {
	Lanes  []LaneStats // ordered by lane, Unordered first (see Store.Stats)
	Parked int64
}
