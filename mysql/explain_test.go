package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// TestExplain proves over 100,000 rows that the hot reads (head of one lane, unordered
// due rows) and the claims built on them walk ix_status_lane in id order: EXPLAIN shows
// no table scan and no filesort, and the handler counters show that a LIMIT 100 read
// touches about 100 index entries, not the table.
func TestExplain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: inserts 100,000 rows")
	}
	db := openDB(t, plainDSN)
	ctx := t.Context()
	const laneCount = 64
	s := newStore(t, db, laneCount)
	table := mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())

	// 100,000 rows: 25% unordered, the rest spread over 64 lanes; 1% parked and 5% not
	// due yet, so the filters have something to skip.
	const total = 100_000
	recs := make([]outbox.Record, 0, 10_000)
	var parked []outbox.ID
	for i := 0; i < total; i++ {
		key := ""
		if i%4 != 0 {
			key = "key-" + strconv.Itoa(i%997)
		}
		r := record(key, laneCount, []byte("explain"))
		if i%20 == 7 {
			r.DeliverAt = t0.Add(48 * time.Hour)
		}
		if i%100 == 3 {
			parked = append(parked, r.ID)
		}
		recs = append(recs, r)
		if len(recs) == cap(recs) {
			insert(t, ctx, db, s, recs)
			recs = recs[:0]
		}
	}
	for _, id := range parked {
		if ok, err := s.Park(ctx, id, "explain", t0); err != nil || !ok {
			t.Fatalf("Park = %v, %v", ok, err)
		}
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}

	const lane, limit = 5, 100
	queries := mysql.HotStatements(s, lane, t0.Add(time.Hour), limit)
	names := make([]string, 0, len(queries))
	for name := range queries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		q := queries[name]
		plan := explain(t, ctx, db, q)
		t.Logf("EXPLAIN %s: type=%s key=%s rows=%s Extra=%q", name, plan["type"], plan["key"], plan["rows"], plan["Extra"])
		if plan["type"] == "ALL" || plan["type"] == "index" {
			t.Errorf("%s scans the table: %s", name, plan)
		}
		if plan["key"] != "ix_status_lane" {
			t.Errorf("%s does not use ix_status_lane: %s", name, plan)
		}
		if strings.Contains(plan["Extra"], "filesort") {
			t.Errorf("%s sorts: %s", name, plan)
		}
		// The estimate ignores LIMIT: it counts the index range (at most the unordered
		// quarter), never the table; the handler counters below show the real work.
		if rows, _ := strconv.Atoi(plan["rows"]); rows > total*6/10 {
			t.Errorf("%s estimates %d rows of %d: %s", name, rows, total, plan)
		}
		if strings.Contains(q, "FOR UPDATE") {
			continue // a locking read needs a transaction; EXPLAIN above is its plan
		}
		reads := handlerReads(t, ctx, db, q)
		t.Logf("%s: %d handler reads (LIMIT %d or less)", name, reads, limit)
		if reads > 3*limit {
			t.Errorf("%s read %d index entries or rows for LIMIT %d", name, reads, limit)
		}
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
