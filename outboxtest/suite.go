package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// testLanes is the lane count of most suite tables: small, so that tests can find keys
// that share a lane.
const testLanes = 8

type subtest struct {
	name string
	fn   func(t *testing.T, h Harness)
}

type group struct {
	name  string
	tests []subtest
}

// Run runs the whole store contract against the dialect h describes, one parallel
// subtest per rule, each in its own tables. Call it from a test of the dialect's package
// (with -run selecting subtests as usual, e.g. -run 'Conformance/Claim/Race').
func Run(t *testing.T, h Harness) {
	h.require(t)
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) {
					t.Parallel()
					st.fn(t, h)
				})
			}
		})
	}
}

func groups() []group {
	return []group{
		{"Schema", schemaTests()},
		{"RoundTrip", roundTripTests()},
		{"Read", readTests()},
		{"Eligibility", eligibilityTests()},
		{"Claim", claimTests()},
		{"Ordered", orderedTests()},
		{"Head", headTests()},
		{"CommitOrder", commitOrderTests()},
		{"Renew", renewTests()},
		{"Complete", completeTests()},
		{"Release", releaseTests()},
		{"Fail", failTests()},
		{"Park", parkTests()},
		{"Parked", parkedTests()},
		{"Stats", statsTests()},
		{"Lease", leaseTests()},
		{"Members", memberTests()},
		{"Insert", insertTests()},
		{"Corrupt", corruptTests()},
		{"Errors", errorTests()},
		{"Arguments", argumentTests()},
		{"LockedBatch", lockedBatchTests()},
		{"Inbox", inboxTests()},
		{"Triggers", triggerTests()},
		{"Isolation", isolationTests()},
		{"Find", findTests()},
	}
}

func (h Harness) require(t testing.TB) {
	t.Helper()
	var missing []string
	if h.DB == nil {
		missing = append(missing, "DB")
	}
	if h.NewStore == nil {
		missing = append(missing, "NewStore")
	}
	if h.Placeholder == nil {
		missing = append(missing, "Placeholder")
	}
	if h.QualifiedTable == nil {
		missing = append(missing, "QualifiedTable")
	}
	if len(missing) > 0 {
		t.Fatalf("outboxtest: Harness %q lacks %s", h.Name, strings.Join(missing, ", "))
	}
}

// env is one test's outbox: its own tables, dropped when the test ends.
type env struct {
	t     testing.TB
	h     Harness
	ctx   context.Context
	opts  outbox.Options
	store outbox.Store
}

func newEnv(t testing.TB, h Harness) *env {
	t.Helper()
	return newEnvWith(t, h, outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: testLanes})
}

func newEnvWith(t testing.TB, h Harness, opts outbox.Options) *env {
	t.Helper()
	s, err := h.NewStore(h.DB, opts)
	if err != nil {
		t.Fatalf("NewStore(%+v): %v", opts, err)
	}
	e := &env{t: t, h: h, ctx: t.Context(), opts: s.Options(), store: s}
	t.Cleanup(func() { e.drop() })
	if err := s.CreateSchema(e.ctx); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	return e
}

// drop removes the test's tables; the test's context is already cancelled here.
func (e *env) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.h.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+e.table(e.opts.TablePrefix+"business")); err != nil {
		e.t.Errorf("drop business table: %v", err)
	}
	if e.h.DropTables != nil {
		if err := e.h.DropTables(e.h.DB, e.opts); err != nil {
			e.t.Errorf("DropTables: %v", err)
		}
		return
	}
	for _, name := range e.opts.TableNames() {
		if _, err := e.h.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+e.table(name)); err != nil {
			e.t.Errorf("drop %s: %v", name, err)
		}
	}
}

func (e *env) table(name string) string { return e.h.QualifiedTable(e.opts, name) }

func (e *env) outboxTable() string { return e.table(e.opts.OutboxTable()) }

// at returns BaseTime plus d.
func at(d time.Duration) time.Time { return BaseTime().Add(d) }

// far is an instant after every DeliverAt and claim the suite makes (about ten years
// after BaseTime, inside every engine's date range).
var far = at(10 * 365 * 24 * time.Hour)

// insert writes recs in one committed transaction.
// insertNew inserts n records of newRecords and returns them.
func (e *env) insertNew(n int) []outbox.Record {
	e.t.Helper()
	recs := newRecords(n)
	e.insert(recs...)
	return recs
}

func (e *env) insert(recs ...outbox.Record) {
	e.t.Helper()
	tx, err := e.h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	if err := e.store.Insert(e.ctx, tx, recs); err != nil {
		_ = tx.Rollback()
		e.t.Fatalf("Insert(%d records): %v", len(recs), err)
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
}

// read returns (copies of) up to n eligible rows of lane after after at now.
func (e *env) read(lane int, after outbox.ID, now time.Time, n int) []outbox.Record {
	e.t.Helper()
	got, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: lane, After: after, Now: now}, make([]outbox.Record, n))
	if err != nil {
		e.t.Fatalf("Read(lane %d, now %s): %v", lane, fmtTime(now), err)
	}
	if len(got) > n {
		e.t.Fatalf("Read returned %d rows into a %d-record destination", len(got), n)
	}
	return cloneRecords(got)
}

// readIDs returns the IDs of every eligible row of lane at now.
func (e *env) readIDs(lane int, now time.Time) []outbox.ID {
	e.t.Helper()
	return ids(e.read(lane, outbox.ID{}, now, 1000))
}

func (e *env) claim(c outbox.ClaimParams) []outbox.Record {
	e.t.Helper()
	got, err := e.store.Claim(e.ctx, c, nil)
	if err != nil {
		e.t.Fatalf("Claim(lane %d, limit %d, now %s): %v", c.Lane, c.Limit, fmtTime(c.Now), err)
	}
	if len(got) > c.Limit {
		e.t.Fatalf("Claim returned %d rows for limit %d", len(got), c.Limit)
	}
	return cloneRecords(got)
}

// claimUnordered claims up to limit unordered rows at now until until with a fresh
// token, returning the token and the rows.
func (e *env) claimUnordered(limit int, now, until time.Time) (outbox.Token, []outbox.Record) {
	e.t.Helper()
	tok := outbox.NewToken()
	return tok, e.claim(outbox.ClaimParams{Lane: outbox.Unordered, Limit: limit, Now: now, Until: until, Token: tok})
}

// claimLane claims the head of lane under lease.
func (e *env) claimLane(lane, limit int, lease outbox.Token, now, until time.Time) (outbox.Token, []outbox.Record) {
	e.t.Helper()
	tok := outbox.NewToken()
	return tok, e.claim(outbox.ClaimParams{Lane: lane, Limit: limit, Now: now, Until: until, Token: tok, Lease: lease})
}

func (e *env) count(now time.Time) int64 {
	e.t.Helper()
	n, err := e.store.Count(e.ctx, now)
	if err != nil {
		e.t.Fatalf("Count(%s): %v", fmtTime(now), err)
	}
	return n
}

// acquire takes lane's lease for an hour (on the database's clock) with a fresh token.
func (e *env) acquire(lane int) outbox.Token { return e.acquireTTL(lane, time.Hour) }

// acquireTTL takes lane's lease for ttl with a fresh token.
func (e *env) acquireTTL(lane int, ttl time.Duration) outbox.Token {
	e.t.Helper()
	tok := outbox.NewToken()
	ok, err := e.store.AcquireLease(e.ctx, outbox.LeaseParams{Lane: lane, Owner: "outboxtest", Token: tok, TTL: ttl})
	if err != nil || !ok {
		e.t.Fatalf("AcquireLease(lane %d) = %v, %v; want true", lane, ok, err)
	}
	return tok
}

// shortTTL is the lease of rules that let a lease expire: long enough for the
// statements made under it on a loaded machine, short enough to wait for.
const shortTTL = time.Second

// waitExpired waits until lane's lease, held with tok, has expired on the database's
// clock (Lease.Live false), for at most ten seconds.
func (e *env) waitExpired(lane int, tok outbox.Token) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		live := false
		for _, l := range e.leases() {
			if l.Lane == lane && l.Token == tok && l.Live {
				live = true
			}
		}
		if !live {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("lease of lane %d still live after 10 s", lane)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) park(id outbox.ID, reason string, now time.Time) {
	e.t.Helper()
	ok, err := e.store.Park(e.ctx, id, reason, now)
	if err != nil || !ok {
		e.t.Fatalf("Park(%s) = %v, %v; want true", id, ok, err)
	}
}

func (e *env) parked() []outbox.Record {
	e.t.Helper()
	got, err := e.store.ListParked(e.ctx, outbox.ParkedQuery{Limit: 1000})
	if err != nil {
		e.t.Fatalf("ListParked: %v", err)
	}
	for i := range got {
		// Whole payloads: BodySize is their length; cleared so that callers compare
		// the records with what was inserted.
		if got[i].BodySize != len(got[i].Body) {
			e.t.Errorf("ListParked: row %s has BodySize %d and %d body bytes", got[i].ID, got[i].BodySize, len(got[i].Body))
		}
		got[i].BodySize = 0
	}
	return cloneRecords(got)
}

// rawCount counts every row of table through raw SQL, whatever its state.
func (e *env) rawCount(table string) int64 {
	e.t.Helper()
	var n int64
	if err := e.h.DB.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM "+e.table(table)).Scan(&n); err != nil {
		e.t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func (e *env) exec(query string, args ...any) {
	e.t.Helper()
	if _, err := e.h.DB.ExecContext(e.ctx, query, args...); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
}

// createBusinessTable makes the test's stand-in for an application table.
func (e *env) createBusinessTable() string {
	e.t.Helper()
	name := e.table(e.opts.TablePrefix + "business")
	e.exec("CREATE TABLE " + name + " (id INT PRIMARY KEY)")
	return name
}

func (e *env) businessCount() int64 {
	e.t.Helper()
	return e.rawCount(e.opts.TablePrefix + "business")
}

// keysInLane returns n distinct ordering keys that map to lane among laneCount lanes.
func keysInLane(lane, laneCount, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if lanes.Of(k, laneCount) == lane {
			keys = append(keys, k)
		}
	}
	return keys
}

// laneRecord returns a record of lane (with a key of that lane) created at createdAt.
func laneRecord(key string, createdAt time.Time) outbox.Record {
	return NewOrderedRecord(createdAt, key, testLanes)
}

func ids(rs []outbox.Record) []outbox.ID {
	out := make([]outbox.ID, len(rs))
	for i := range rs {
		out[i] = rs[i].ID
	}
	return out
}

func idsOf(rs ...outbox.Record) []outbox.ID { return ids(rs) }

// sameIDs fails the test unless got lists exactly want, in order.
func sameIDs(t testing.TB, what string, got, want []outbox.ID) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got ids %s, want %s", what, idList(got), idList(want))
	}
}

func idList(ids []outbox.ID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func checkRecord(t testing.TB, what string, got, want outbox.Record) {
	t.Helper()
	if d := diffRecord(got, want); len(d) > 0 {
		t.Errorf("%s (row %s):\n\t%s", what, want.ID, strings.Join(d, "\n\t"))
	}
}

func wantN(t testing.TB, what string, got int, err error, want int) {
	t.Helper()
	if err != nil || got != want {
		t.Fatalf("%s = %d, %v; want %d, nil", what, got, err, want)
	}
}

func wantBool(t testing.TB, what string, got bool, err error, want bool) {
	t.Helper()
	if err != nil || got != want {
		t.Fatalf("%s = %v, %v; want %v, nil", what, got, err, want)
	}
}

func openClosable(h Harness) (*sql.DB, error) {
	switch {
	case h.OpenDB != nil:
		return h.OpenDB()
	case h.OpenInTimeZone != nil:
		return h.OpenInTimeZone("+00:00")
	}
	return nil, errors.New("Harness.OpenDB is nil (and OpenInTimeZone too): the suite needs a *sql.DB it may close")
}
