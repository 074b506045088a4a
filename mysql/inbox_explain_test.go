package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// TestExplainInbox: recording a message walks the primary key only, whatever the
// table's size: over a filled inbox (300,000 entries over 10 consumers; 10,000,000
// under OUTBOX_TEST_FULL=1) the key lookup of the duplicate check is a single-row
// primary key access, a new entry and a duplicate (an insert attempt that raises the
// found entry's count) each take a handful of handler steps (no scan), retention's
// DELETE walks ix_processed_at without sorting, and InboxStats reads at most
// outbox.InboxStatsMaxEntries+1 entries per consumer, twice (the GROUP BY it replaced
// read the whole table).
func TestExplainInbox(t *testing.T) {
	if testing.Short() {
		t.Skip("short: inserts 300,000 entries")
	}
	total := 300_000
	if os.Getenv("OUTBOX_TEST_FULL") == "1" {
		total = 10_000_000
	}
	db := openDB(t, plainDSN)
	ctx := t.Context()
	s := newStore(t, db, 8)
	table := mysql.QualifiedTable(s.Options(), s.Options().InboxTable())
	fillInbox(t, ctx, db, table, total)
	mariadb := isMariaDB(t, db)

	st := mysql.InboxStatements(s, "consumer-3", fmt.Sprintf("uuid-%d", total/2+3), t0.Add(-time.Hour), 1000)
	if mariadb {
		plan := explain(t, ctx, db, st["lookup"])
		t.Logf("EXPLAIN key lookup: type=%s key=%s rows=%s", plan["type"], plan["key"], plan["rows"])
		if plan["type"] != "const" || plan["key"] != "PRIMARY" {
			t.Errorf("the key lookup is not a primary key access: %v", plan)
		}
	} else {
		var tree string
		if err := db.QueryRowContext(ctx, "EXPLAIN FORMAT=TREE "+st["lookup"]).Scan(&tree); err != nil {
			t.Fatal(err)
		}
		t.Logf("EXPLAIN key lookup:\n%s", tree)
		if strings.Contains(tree, "scan") || strings.Contains(tree, "Sort") {
			t.Errorf("the key lookup scans or sorts")
		}
	}
	// FORMAT=TREE cannot show a DELETE on Oracle MySQL (its default); the tabular form
	// can on both.
	prune := st["prune"]
	if !mariadb {
		prune = "FORMAT=TRADITIONAL " + prune
	}
	plan := explain(t, ctx, db, prune)
	t.Logf("EXPLAIN prune: type=%s key=%s rows=%s Extra=%q", plan["type"], plan["key"], plan["rows"], plan["Extra"])
	if plan["key"] != "ix_processed_at" || strings.Contains(plan["Extra"], "filesort") {
		t.Errorf("prune does not walk ix_processed_at: %v", plan)
	}
	// InboxStats on a pool of one connection, whose session counters then see all of it.
	one := openDB(t, plainDSN)
	one.SetMaxOpenConns(1)
	so, err := mysql.New(one, s.Options())
	if err != nil {
		t.Fatal(err)
	}
	r0 := sessionHandlerReads(t, ctx, one)
	stats, err := so.InboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reads := sessionHandlerReads(t, ctx, one) - r0
	// Each consumer's capped read is materialised (a derived table with LIMIT): up to
	// twice its entries read, never more; the table's 300,000 are not all read.
	bound := int64(10*2*(outbox.InboxStatsMaxEntries+1) + 1000)
	t.Logf("InboxStats over %d entries: %d handler reads (bound %d), partial %v, estimate %d", total, reads, bound, stats.Partial(), stats.EstimatedEntries)
	if reads > bound || len(stats.Consumers) != 10 || !stats.Partial() {
		t.Errorf("InboxStats took %d handler reads over %d entries (bound %d), %d consumers, partial %v", reads, total, bound, len(stats.Consumers), stats.Partial())
	}
	// A duplicate (an existing key: its count is raised in place) and a new key, each in
	// a transaction rolled back.
	newKey := mysql.InboxStatements(s, "consumer-3", "a-new-uuid", t0, 1000)["record"]
	for _, c := range []struct{ name, q string }{{"duplicate", st["record"]}, {"new entry", newKey}} {
		reads, writes, err := insertHandlerSteps(t, ctx, db, c.q)
		if err != nil {
			t.Fatalf("record %s: %v", c.name, err)
		}
		t.Logf("record %s over %d entries: %d handler reads, %d writes", c.name, total, reads, writes)
		if reads > 5 {
			t.Errorf("record %s took %d handler reads over %d entries", c.name, reads, total)
		}
	}
}

// fillInbox inserts total entries over 10 consumers with one statement (a cross join of
// digit tables), processed over the last 10 days.
func fillInbox(t *testing.T, ctx context.Context, db *sql.DB, table string, total int) {
	t.Helper()
	digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
		"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	var from, num []string
	for i, p := 0, 1; p < total; i, p = i+1, p*10 {
		from = append(from, fmt.Sprintf("%s d%d", digits, i))
		num = append(num, fmt.Sprintf("d%d.d*%d", i, p))
	}
	n := strings.Join(num, "+")
	q := fmt.Sprintf("INSERT INTO %s (consumer, message_uuid, processed_at) SELECT CONCAT('consumer-', (%[2]s) %% 10), CONCAT('uuid-', %[2]s), "+
		"TIMESTAMPADD(SECOND, -((%[2]s) %% 864000), '2026-05-06 07:08:09') FROM %[3]s WHERE %[2]s < %[4]d",
		table, n, strings.Join(from, " CROSS JOIN "), total)
	start := time.Now()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %d entries in %s", total, time.Since(start).Round(time.Millisecond))
}

// insertHandlerSteps runs q in a transaction that it rolls back and returns the
// Handler_read_* and Handler_write steps it took.
func insertHandlerSteps(t *testing.T, ctx context.Context, db *sql.DB, q string) (reads, writes int64, err error) {
	t.Helper()
	conn, cerr := db.Conn(ctx)
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer conn.Close()
	sum := func() (r, w int64) {
		rows, err := conn.QueryContext(ctx, "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%' OR Variable_name = 'Handler_write'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			if name == "Handler_write" {
				w += v
			} else {
				r += v
			}
		}
		return r, w
	}
	if _, berr := conn.ExecContext(ctx, "BEGIN"); berr != nil {
		t.Fatal(berr)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck
	r0, w0 := sum()
	_, err = conn.ExecContext(ctx, q) // a duplicate fails with 1062
	r1, w1 := sum()
	r2, w2 := sum() // SHOW STATUS's own steps
	return (r1 - r0) - (r2 - r1), (w1 - w0) - (w2 - w1), err
}

// sessionHandlerReads sums the session's Handler_read_* counters (db: a pool of one
// connection).
func sessionHandlerReads(t *testing.T, ctx context.Context, db *sql.DB) int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}
