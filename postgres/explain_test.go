package postgres

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// TestExplainHotReads fills an outbox with 100,000 rows (half unordered, half spread over
// 64 lanes, a few parked, a few scheduled later) and fails when a hot statement — the
// head-of-lane read, the unordered due read, the claims built on them, renewal and
// release by token, completion — plans a sequential scan of the outbox table, misses its
// index, or sorts rows instead of walking an index in id order. Each statement is
// planned both as a custom plan (values known) and as the generic plan that pgx's
// statement cache ends up using, and under several states of the table's statistics:
// analyzed, analyzed while empty, never analyzed (autovacuum off or not run yet), never
// analyzed after draining half the backlog, and filled through Store.Insert.
func TestExplainHotReads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		analyze bool
		drain   bool // delete the first half of the unordered rows (a drained backlog)
		insert  bool // fill with 100 Store.Insert transactions of unordered rows instead
		early   bool // ANALYZE the empty table first (stale statistics)
	}{
		{"analyzed", true, false, false, false},
		{"analyzed empty, then filled", false, false, true, true},
		// autovacuum off or not run yet: the planner works on default selectivities.
		{"never analyzed", false, false, false, false},
		{"never analyzed, half drained", false, true, false, false},
		{"never analyzed, inserted unordered", false, false, true, false},
		// A backlog of unordered rows only, analyzed: the lanes' index is empty and the
		// statistics say every lane is NULL (the state in which the old recursive
		// pending-lanes probe was estimated above jit_above_cost).
		{"analyzed, inserted unordered", true, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			explainHotReads(t, c.analyze, c.drain, c.insert, c.early)
		})
	}
}

func explainHotReads(t *testing.T, analyze, drain, viaInsert, early bool) {
	db, err := sql.Open("pgx", testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the tables' cleanup below, which uses it
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: 64}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tbl := range []string{s.n().outbox, s.n().lanes, s.n().nodes, s.n().inbox, s.n().inboxLease} {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tbl); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	// Each case sets its own statistics state; an auto-ANALYZE in the middle of the fill
	// (scripts/services turns autovacuum on) would give the "never analyzed" cases a
	// sample of half a table, a state no case means to test (seen as a rare flake).
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+s.n().outbox+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// ids: 16 big-endian bytes of g; odd g in lane g%64, even g unordered; every 97th row
	// parked, every 89th scheduled a day later.
	fill := `INSERT INTO ` + s.n().outbox + ` (id, message_uuid, lane, ordering_key, destination, headers, body, created_at, deliver_at, status)
		SELECT decode(lpad(to_hex(g), 32, '0'), 'hex'), 'uuid-' || g,
			CASE WHEN g % 2 = 1 THEN g % 64 END, CASE WHEN g % 2 = 1 THEN 'key-' || (g % 640) END,
			'topic', decode('0100000000000000', 'hex'), convert_to(repeat('x', 200), 'UTF8'),
			$1::timestamptz, $1::timestamptz + CASE WHEN g % 89 = 0 THEN interval '1 day' ELSE interval '0' END,
			CASE WHEN g % 97 = 0 THEN 'parked' ELSE 'pending' END
		FROM generate_series(1, 100000) AS g`
	if early {
		if _, err := db.ExecContext(ctx, "ANALYZE "+s.n().outbox); err != nil {
			t.Fatal(err)
		}
	}
	if !viaInsert {
		if _, err := db.ExecContext(ctx, fill, t0); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 * btoi(viaInsert) {
		recs := make([]outbox.Record, 1000)
		for i := range recs {
			recs[i] = outbox.Record{ID: outbox.NewID(), MessageUUID: "u", Lane: outbox.Unordered, Destination: "topic",
				Headers: []byte{1, 0, 0, 0, 0, 0, 0, 0}, Body: make([]byte, 200), CreatedAt: t0}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, tx, recs); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if drain {
		if _, err := db.ExecContext(ctx, `DELETE FROM `+s.n().outbox+` WHERE lane IS NULL AND id < decode(lpad(to_hex(50000), 32, '0'), 'hex')`); err != nil {
			t.Fatal(err)
		}
	}
	if analyze {
		if _, err := db.ExecContext(ctx, "ANALYZE "+s.n().outbox); err != nil {
			t.Fatal(err)
		}
	}
	lane, lease, tok := 5, outbox.NewToken(), outbox.NewToken()
	if ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: "explain", Token: lease, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	now, until, zero := t0.Add(time.Second), t0.Add(time.Minute), outbox.ID{}
	// A lane run's ids as a lane worker deletes them: 512 rows of the lane (the fill puts
	// row g in lane g%64 when g is odd).
	var laneIDs [][]byte
	for g := lane; len(laneIDs) < 512; g += 64 {
		laneIDs = append(laneIDs, binary.BigEndian.AppendUint64(make([]byte, 8, 16), uint64(g)))
	}
	for _, st := range []struct {
		name  string
		query string
		index string // the index the statement must use ("a|b": either)
		args  []any
	}{
		{"unordered due read", s.q.readUnordered, suffixDueIx, []any{zero[:], now, 100}},
		{"ordered claim", s.q.claimLane, suffixLaneIx, []any{tok[:], until, now, 100, lane, lease[:]}},
		{"ordered claim holding parked keys", s.q.claimLaneHold, suffixLaneIx, []any{tok[:], until, now, 100, lane, lease[:]}},
		{"unordered claim", s.q.claimUnordered, suffixDueIx, []any{tok[:], until, now, 100, zero[:]}},
		{"unordered locked batch", s.q.lockUnordered, suffixDueIx, []any{now, 500, zero[:]}},
		{"locked batch delete", s.q.lockedDelete, suffixOutbox + "_pkey", []any{[][]byte{zero[:]}}},
		{"pending lanes probe", s.q.pendingLanes, suffixLaneIx, nil},
		{"lane run read", s.q.laneRun, suffixLaneIx, []any{lane, int64(0), 512}},
		// Either index: through the lanes' index it walks the lane and filters the run's
		// ids, through the primary key it looks each id up; on a 1,000,000-row table
		// (15,600 rows per lane) both took 12-13 ms for 512 rows (2026-12-05).
		{"lane run delete", s.q.completeLane, suffixLaneIx + "|" + suffixOutbox + "_pkey", []any{laneIDs, lane, lease[:]}},
		// Token claims are renewed, released and completed by id (no index on tokens).
		{"renew by ids", s.q.renew[1], suffixOutbox + "_pkey", []any{tok[:], now, until, [][]byte{zero[:]}}},
		{"release by ids", s.q.release[1], suffixOutbox + "_pkey", []any{tok[:], now, [][]byte{zero[:]}}},
		{"complete", s.q.complete[0], suffixOutbox + "_pkey", []any{tok[:], now, [][]byte{zero[:]}}},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, ctx, db, mode, st.query, st.args)
			t.Logf("%s (%s):\n%s", st.name, mode, plan.text)
			if plan.cost >= jitAboveCostDefault {
				t.Errorf("%s (%s) is estimated at %.0f, at or above PostgreSQL's default jit_above_cost (%d): the server would JIT-compile it on every call",
					st.name, mode, plan.cost, jitAboveCostDefault)
			}
			// A lane run's read as a custom plan (the first five executions on a
			// connection) may sort the lane's rows when the lane holds little more than
			// LaneBatch of them (a bitmap scan of ~1,500 index entries, here); the generic
			// plan that pgx's statement cache then runs walks the index.
			customRunRead := st.name == "lane run read" && mode == "force_custom_plan"
			if plan.sortsBacklog && !customRunRead && st.name != "ordered claim" && st.name != "ordered claim holding parked keys" && st.name != "pending lanes probe" {
				// Only the ordered claims sort, and only the few rows of a lane's head run
				// (the lanes probe sorts its Options.Lanes lane numbers).
				t.Errorf("%s (%s) sorts rows of the outbox instead of walking an index in id order", st.name, mode)
			}
			if plan.seqScans[opts.OutboxTable()] {
				t.Errorf("%s (%s) scans %s sequentially", st.name, mode, opts.OutboxTable())
			}
			used := false
			for _, ix := range strings.Split(st.index, "|") {
				used = used || plan.indexes[opts.TablePrefix+ix]
			}
			if !used {
				t.Errorf("%s (%s) does not use index %s", st.name, mode, opts.TablePrefix+st.index)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Store) n() names { return s.q.n }

// jitAboveCostDefault is PostgreSQL's default jit_above_cost: a statement estimated at
// this cost or more is JIT-compiled on every execution (a cost paid in server CPU, 150 to
// 370 ms per call of the old pending-lanes probe).
const jitAboveCostDefault = 100_000

type planSummary struct {
	text     string
	cost     float64         // the plan's total estimated cost
	seqScans map[string]bool // relation names
	// sortsBacklog: a Sort node in the plan (the unordered statements and the lane read
	// must walk an index in id order instead)
	sortsBacklog bool
	indexes      map[string]bool // index names
}

// explain plans query (without running it) under plan_cache_mode mode through a prepared
// statement, as pgx's statement cache runs it.
func explain(t *testing.T, ctx context.Context, db *sql.DB, mode, query string, args []any) planSummary {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var sum planSummary
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		if _, err := pc.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			return err
		}
		defer pc.Exec(ctx, "RESET plan_cache_mode") //nolint:errcheck
		if _, err := pc.Exec(ctx, "PREPARE explained AS "+query); err != nil {
			return err
		}
		defer pc.Exec(ctx, "DEALLOCATE explained") //nolint:errcheck
		// EXPLAIN EXECUTE takes no bind parameters: pass the values as literals.
		params := make([]string, len(args))
		for i, a := range args {
			switch v := a.(type) {
			case []byte:
				params[i] = fmt.Sprintf(`decode('%x', 'hex')`, v)
			case [][]byte:
				elems := make([]string, len(v))
				for j := range v {
					elems[j] = fmt.Sprintf(`decode('%x', 'hex')`, v[j])
				}
				params[i] = "ARRAY[" + strings.Join(elems, ", ") + "]"
			case time.Time:
				params[i] = "'" + v.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz"
			case string:
				params[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
			default:
				params[i] = fmt.Sprint(v)
			}
		}
		exec := "EXECUTE explained"
		if len(params) > 0 {
			exec += "(" + strings.Join(params, ", ") + ")"
		}
		var raw []byte
		if err := pc.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+exec).Scan(&raw); err != nil {
			return err
		}
		var text strings.Builder
		rows, err := pc.Query(ctx, "EXPLAIN "+exec)
		if err != nil {
			return err
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			text.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			return err
		}
		sum = summarize(t, raw)
		sum.text = text.String()
		return nil
	})
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	return sum
}

func summarize(t *testing.T, raw []byte) planSummary {
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN JSON: %v", err)
	}
	sum := planSummary{seqScans: map[string]bool{}, indexes: map[string]bool{}}
	sum.cost, _ = doc[0].Plan["Total Cost"].(float64)
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Node Type"] == "Sort" {
			sum.sortsBacklog = true
		}
		if n["Node Type"] == "Seq Scan" {
			rel, _ := n["Relation Name"].(string)
			sum.seqScans[rel] = true
		}
		if ix, ok := n["Index Name"].(string); ok {
			sum.indexes[ix] = true
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	walk(doc[0].Plan)
	return sum
}
