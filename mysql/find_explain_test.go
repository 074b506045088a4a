package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// TestExplainFind proves that every statement of FindRows and FindInbox reads an index
// range, never the table, on MariaDB and on Oracle MySQL: over the hot reads' table of
// 100,000 rows (1,000,000 with OUTBOX_TEST_FULL=1; distinct message UUIDs, 64 lanes, 10 %
// parked, 10 % scheduled), a UUID within a window and an ordering key read ranges of the
// primary key, a window with a topic reads the window's range of each lane, and, once
// FindIndexScript has run, a UUID alone is a lookup of ix_message_uuid. The handler
// counters bound the entries each statement touched. The inbox's consumer list is a
// loose scan of its primary key and the entries are points of it.
func TestExplainFind(t *testing.T) {
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
	var mark outbox.ID // the row at nine tenths: the windows start there
	fillExplainTableWith(t, ctx, db, s, table, total, laneCount, func(i int, r *outbox.Record) {
		r.MessageUUID = "m-" + strconv.Itoa(i)
		if i == total*9/10 {
			mark = r.ID
		}
	})
	mariadb := isMariaDB(t, db)
	from := mark.Time()
	window := outbox.FindQuery{From: from, To: from.Add(20 * time.Millisecond)}
	uuid := window
	uuid.MessageUUID = "m-" + strconv.Itoa(total*9/10)
	topic := window
	topic.Topic = "topic"
	// A window's statements read the window's rows (each lane's range of it) and, on Oracle
	// MySQL, the rows they return once more by row id after sorting them.
	var inWindow int
	lo, hi, _ := window.IDRange()
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE id >= ? AND id < ?", lo[:], hi[:]).Scan(&inWindow); err != nil {
		t.Fatal(err)
	}
	// The rows of the lanes are read whole: their key is (lane, seq, id), and a lane's
	// seq order has no id bound (mysql.FindRows); Oracle MySQL may walk the whole key
	// for that statement. Only the unordered rows are a range of the window. A known
	// cost of a window lookup on MySQL since lanes are ordered by seq (2026-12-08).
	inWindow = total
	t.Logf("the window holds %d of %d rows", inWindow, total)
	cases := []struct {
		name     string
		q        outbox.FindQuery
		indexed  bool
		maxReads int
	}{
		{"uuid in a window", uuid, false, inWindow + 2*(2*laneCount+2) + 2*(outbox.FindLimitDefault+1)},
		{"ordering key", outbox.FindQuery{OrderingKey: "key-5"}, false, total / 40},
		{"topic in a window", topic, false, inWindow + 2*(2*laneCount+2) + 2*(outbox.FindLimitDefault+1)},
	}
	for _, c := range cases {
		checkFind(t, ctx, db, s, c.name, c.q, c.indexed, total, c.maxReads, mariadb)
	}
	script, err := mysql.FindIndexScript(s.Options())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := db.ExecContext(ctx, script); err != nil {
		t.Fatalf("FindIndexScript: %v", err)
	}
	t.Logf("FindIndexScript over %d rows took %s", total, time.Since(start).Round(time.Millisecond))
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	checkFind(t, ctx, db, s, "uuid by the index", outbox.FindQuery{MessageUUID: uuid.MessageUUID}, true, total, 5, mariadb)

	// The row-lock probe: points of the primary key.
	probe := make([]outbox.ID, 0, 100)
	lo, _, _ = window.IDRange()
	rows, err := db.QueryContext(ctx, "SELECT id FROM "+table+" WHERE lane = -1 AND seq = -1 AND id >= ? ORDER BY id LIMIT 100", lo[:])
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		var id outbox.ID
		copy(id[:], b)
		probe = append(probe, id)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	free, present := mysql.LockedRowsStatements(s, probe)
	for _, st := range []struct{ name, q string }{{"lock probe", free}, {"lock probe, present rows", present}} {
		checkFindPlan(t, ctx, db, st.name, st.q, total, mariadb)
		if reads := findHandlerReads(t, ctx, db, st.q); reads > 2*int64(len(probe))+10 {
			t.Errorf("%s read %d entries for %d ids", st.name, reads, len(probe))
		}
	}

	inbox := mysql.QualifiedTable(s.Options(), s.Options().InboxTable())
	fillInbox(t, ctx, db, inbox, total)
	consumers := make([]string, 10)
	for i := range consumers {
		consumers[i] = fmt.Sprintf("consumer-%d", i)
	}
	list, entries := mysql.FindInboxStatements(s, fmt.Sprintf("uuid-%d", total/2+3), consumers)
	for _, st := range []struct{ name, q string }{{"inbox consumers", list}, {"inbox entries", entries}} {
		checkFindPlan(t, ctx, db, st.name, st.q, total, mariadb)
		reads := handlerReads(t, ctx, db, st.q)
		t.Logf("%s: %d handler reads over %d entries", st.name, reads, total)
		if reads > 40 {
			t.Errorf("%s took %d handler reads over %d entries", st.name, reads, total)
		}
	}
}

// checkFind checks the plan and the handler reads of each statement of q.
func checkFind(t *testing.T, ctx context.Context, db *sql.DB, s *mysql.Store, name string, q outbox.FindQuery, indexed bool, total, maxReads int, mariadb bool) {
	t.Helper()
	for i, st := range mysql.FindStatements(s, q, indexed) {
		n := fmt.Sprintf("%s (%d)", name, i+1)
		checkFindPlan(t, ctx, db, n, st, total, mariadb)
		if reads := findHandlerReads(t, ctx, db, st); reads > int64(maxReads) {
			t.Errorf("%s read %d index entries or rows over %d rows (at most %d)", n, reads, total, maxReads)
		} else {
			t.Logf("%s: %d handler reads over %d rows", n, reads, total)
		}
	}
}

// checkFindPlan: a range, ref or lookup of the primary key or of ix_message_uuid (or a
// loose index scan), never a table scan or a scan of a whole index.
func checkFindPlan(t *testing.T, ctx context.Context, db *sql.DB, name, q string, total int, mariadb bool) {
	t.Helper()
	if !mariadb {
		var tree string
		if err := db.QueryRowContext(ctx, "EXPLAIN FORMAT=TREE "+q).Scan(&tree); err != nil {
			t.Fatalf("EXPLAIN FORMAT=TREE: %v", err)
		}
		t.Logf("EXPLAIN %s:\n%s", name, tree)
		if strings.Contains(tree, "Table scan on ") && !strings.Contains(tree, "Table scan on <temporary>") || strings.Contains(tree, "Index scan on ") {
			t.Errorf("%s scans the table or a whole index", name)
		}
		if !strings.Contains(tree, "using PRIMARY") && !strings.Contains(tree, "using "+mysql.FindIndexName) {
			t.Errorf("%s uses neither the primary key nor %s", name, mysql.FindIndexName)
		}
		return
	}
	plan := explain(t, ctx, db, q)
	t.Logf("EXPLAIN %s: type=%s key=%s rows=%s Extra=%q", name, plan["type"], plan["key"], plan["rows"], plan["Extra"])
	if plan["type"] == "ALL" || (plan["type"] == "index" && !strings.Contains(plan["Extra"], "for group-by")) {
		t.Errorf("%s scans the table or a whole index: %v", name, plan)
	}
	if plan["key"] != "PRIMARY" && plan["key"] != mysql.FindIndexName {
		t.Errorf("%s uses key %q, not the primary key or %s", name, plan["key"], mysql.FindIndexName)
	}
	// A window's second statement reads the lanes whole (see inWindow above).
	if rows, _ := strconv.Atoi(plan["rows"]); rows > total/2 && !strings.HasSuffix(name, "in a window (2)") {
		t.Errorf("%s estimates %d rows of %d", name, rows, total)
	}
}

// findHandlerReads is handlerReads for a statement that may return no row.
func findHandlerReads(t *testing.T, ctx context.Context, db *sql.DB, q string) int64 {
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
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	return sum() - before
}
