package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// TestExplain proves that the hot reads (head of one lane, unordered due rows) and the
// claims built on them walk the primary key (lane, id) in id order, on MariaDB and on
// Oracle MySQL: each engine's own EXPLAIN shows a range of it, no table scan and no
// sort, and the
// handler counters show that a LIMIT 100 read touches about 100 index entries, never
// the rows it must skip. The table holds 100,000 rows (1,000,000 with
// OUTBOX_TEST_FULL=1): a quarter unordered, the rest over 64 lanes, 10 % parked and
// 10 % scheduled for later.
func TestExplain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: inserts 100,000 rows")
	}
	total := 100_000
	if os.Getenv("OUTBOX_TEST_FULL") == "1" {
		total = 1_000_000
	}
	db := openDB(t, plainDSN)
	ctx := t.Context()
	const laneCount = 64
	s := newStore(t, db, laneCount)
	table := mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())
	fillExplainTable(t, ctx, db, s, table, total, laneCount)
	mariadb := isMariaDB(t, db)

	const lane, limit = 5, 100
	queries := mysql.HotStatements(s, lane, t0.Add(time.Hour), limit)
	names := make([]string, 0, len(queries))
	for name := range queries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		q := queries[name]
		if mariadb {
			checkPlanMariaDB(t, ctx, db, name, q, total)
		} else {
			checkPlanMySQL(t, ctx, db, name, q)
		}
		if strings.Contains(q, "FOR UPDATE") {
			continue // a locking read needs a transaction; EXPLAIN above is its plan
		}
		reads := handlerReads(t, ctx, db, q)
		t.Logf("%s: %d handler reads (LIMIT %d or less) over %d rows", name, reads, limit, total)
		if reads > 3*limit/2 {
			t.Errorf("%s read %d index entries or rows for LIMIT %d", name, reads, limit)
		}
	}
	// The parked rows' own range: listing them reads them, not the pending ones.
	for name, q := range mysql.ParkedStatements(s, 100) {
		if mariadb {
			checkPlanMariaDB(t, ctx, db, name, q, total)
		} else {
			checkPlanMySQL(t, ctx, db, name, q)
		}
	}
}

// fillExplainTable inserts total rows: every fourth unordered, the rest spread over
// the lanes by 997 keys; then parks every tenth row and schedules another tenth for
// two days later, so that the hot reads have rows to skip.
func fillExplainTable(t *testing.T, ctx context.Context, db *sql.DB, s *mysql.Store, table string, total, laneCount int) {
	t.Helper()
	fillExplainTableWith(t, ctx, db, s, table, total, laneCount, nil)
}

// fillExplainTableWith is fillExplainTable with mod applied to the i-th record before
// it is inserted.
func fillExplainTableWith(t *testing.T, ctx context.Context, db *sql.DB, s *mysql.Store, table string, total, laneCount int, mod func(i int, r *outbox.Record)) {
	t.Helper()
	recs := make([]outbox.Record, 0, 10_000)
	var parked [][]byte
	for i := 0; i < total; i++ {
		key := ""
		if i%4 != 0 {
			key = "key-" + strconv.Itoa(i%997)
		}
		r := record(key, laneCount, []byte("explain"))
		// Groups of four consecutive rows (one unordered, three ordered) share a state.
		if i/4%10 == 7 {
			r.DeliverAt = t0.Add(48 * time.Hour)
		}
		if i/4%10 == 3 {
			parked = append(parked, r.ID[:])
		}
		if mod != nil {
			mod(i, &r)
		}
		recs = append(recs, r)
		if len(recs) == cap(recs) || i == total-1 {
			insert(t, ctx, db, s, recs)
			recs = recs[:0]
		}
	}
	for len(parked) > 0 {
		n := min(len(parked), 1000)
		args := make([]any, n)
		for i := range args {
			args[i] = parked[i]
		}
		q := "UPDATE " + table + " SET status = 'parked', lane = -3 - lane WHERE lane IN (" + mysql.LaneList(laneCount) +
			") AND id IN (?" + strings.Repeat(", ?", n-1) + ")"
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("park: %v", err)
		}
		parked = parked[n:]
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
}

// checkPlanMariaDB reads MariaDB's tabular EXPLAIN: a range of the primary key, no full
// scan, no filesort, and a row estimate of a range, not of the table.
func checkPlanMariaDB(t *testing.T, ctx context.Context, db *sql.DB, name, q string, total int) {
	t.Helper()
	plan := explain(t, ctx, db, q)
	t.Logf("EXPLAIN %s: type=%s key=%s rows=%s Extra=%q", name, plan["type"], plan["key"], plan["rows"], plan["Extra"])
	if plan["type"] == "ALL" || plan["type"] == "index" {
		t.Errorf("%s scans the table: %s", name, plan)
	}
	if plan["key"] != "PRIMARY" {
		t.Errorf("%s does not use the primary key: %s", name, plan)
	}
	if strings.Contains(plan["Extra"], "filesort") && !strings.Contains(name, "parked") {
		t.Errorf("%s sorts: %s", name, plan)
	}
	// The estimate ignores LIMIT: it counts the index range (at most the unordered
	// quarter), never the table; the handler counters show the real work.
	if rows, _ := strconv.Atoi(plan["rows"]); rows > total*6/10 {
		t.Errorf("%s estimates %d rows of %d: %s", name, rows, total, plan)
	}
}

// checkPlanMySQL reads Oracle MySQL's tree EXPLAIN: the access path is a range scan or
// lookup on the primary key, with no table scan, no full index scan and no sort (the
// parked listings sort their own range).
func checkPlanMySQL(t *testing.T, ctx context.Context, db *sql.DB, name, q string) {
	t.Helper()
	var tree string
	if err := db.QueryRowContext(ctx, "EXPLAIN FORMAT=TREE "+q).Scan(&tree); err != nil {
		t.Fatalf("EXPLAIN FORMAT=TREE: %v", err)
	}
	t.Logf("EXPLAIN %s:\n%s", name, tree)
	for _, bad := range []string{"Table scan", "Sort:", "Index scan"} {
		if strings.Contains(strings.ReplaceAll(tree, "Table scan on <temporary>", ""), bad) && !(bad == "Sort:" && strings.Contains(name, "parked")) {
			t.Errorf("%s: plan has %q", name, bad)
		}
	}
	if !strings.Contains(tree, "using PRIMARY") {
		t.Errorf("%s does not use the primary key", name)
	}
}

// explain returns the first row of EXPLAIN q as column -> value.
func explain(t *testing.T, ctx context.Context, db *sql.DB, q string) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(ctx, "EXPLAIN "+q)
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatalf("EXPLAIN returned no row: %v", rows.Err())
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	plan := make(map[string]string, len(cols))
	for i, c := range cols {
		plan[c] = vals[i].String
	}
	return plan
}

// handlerReads runs q on one connection and returns how many Handler_read_* steps it
// took (index lookups and next-entry reads): a table scan would show ~100,000.
func handlerReads(t *testing.T, ctx context.Context, db *sql.DB, q string) int64 {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sum := func() int64 {
		rows, err := conn.QueryContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read%'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var n int64
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			n += v
		}
		return n
	}
	before := sum()
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal(fmt.Sprintf("query returned no rows: %s", q))
	}
	// SHOW STATUS itself reads a few rows; measure that overhead and subtract it.
	after := sum()
	overhead := sum() - after
	return after - before - overhead
}
