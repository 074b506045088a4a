package postgres

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// TestExplainFind fills an outbox with 100,000 rows (1,000,000 with OUTBOX_TEST_FULL=1;
// ids a hundred per millisecond, distinct message UUIDs, half over 64 lanes, every 97th
// parked) and an inbox with as many entries over 10 consumers, and fails when a
// statement of FindRows or FindInbox plans a sequential scan, uses none of its indexes,
// or is estimated at or above jit_above_cost, as a custom and as a generic plan: a UUID
// within a window and a window with a topic walk the primary key over the window, an
// ordering key reads the lane index and the parked rows' key index, a UUID alone reads
// FindIndexScript's index once it exists, and the inbox lookup is a loose scan of its
// primary key (one probe per consumer) and a point of it per consumer.
func TestExplainFind(t *testing.T) {
	t.Parallel()
	total := 100_000
	if os.Getenv("OUTBOX_TEST_FULL") == "1" {
		total = 1_000_000
	}
	db, err := sql.Open("pgx", testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
	base := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	start := time.Now()
	fillFind(t, ctx, db, s, base, total)
	t.Logf("filled %d rows and %d inbox entries in %s", total, total, time.Since(start).Round(time.Millisecond))

	mid := base.Add(time.Duration(total/100*9/10) * time.Millisecond) // nine tenths in
	window := outbox.FindQuery{From: mid, To: mid.Add(100 * time.Millisecond)}
	uuid := window
	uuid.MessageUUID = "uuid-" + strconv.Itoa(total*9/10+5)
	topic := window
	topic.Topic = "topic"
	pkey := opts.TablePrefix + suffixOutbox + "_pkey"
	cases := []struct {
		name    string
		q       outbox.FindQuery
		indexes []string // per statement: the index it must use ("a|b": either)
	}{
		{"uuid in a window", uuid, []string{pkey}},
		{"ordering key", outbox.FindQuery{OrderingKey: "key-5"}, []string{opts.TablePrefix + suffixLaneIx, opts.TablePrefix + suffixParkKeyIx}},
		{"topic in a window", topic, []string{pkey}},
	}
	for _, c := range cases {
		checkFindPlans(t, ctx, db, s, c.name, c.q, c.indexes)
	}
	script, err := FindIndexScript(opts)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := db.ExecContext(ctx, script); err != nil {
		t.Fatalf("FindIndexScript: %v", err)
	}
	t.Logf("FindIndexScript over %d rows took %s", total, time.Since(start).Round(time.Millisecond))
	if _, err := db.ExecContext(ctx, "ANALYZE "+s.n().outbox); err != nil {
		t.Fatal(err)
	}
	checkFindPlans(t, ctx, db, s, "uuid by the index", outbox.FindQuery{MessageUUID: uuid.MessageUUID}, []string{opts.TablePrefix + suffixUUIDIx})

	// The row-lock probe: points of the primary key (100 ids of the window).
	var probe [][]byte
	for g := total * 9 / 10; len(probe) < 100; g++ {
		id := make([]byte, 16)
		copy(id, binary.BigEndian.AppendUint64(nil, uint64(base.UnixMilli()+int64(g/100)))[2:])
		binary.BigEndian.PutUint64(id[8:], uint64(g))
		probe = append(probe, id)
	}
	free, present := lockedRowsStatements(s.n().outbox)
	for _, st := range []struct{ name, q string }{{"lock probe", free}, {"lock probe, present rows", present}} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, ctx, db, mode, st.q, []any{probe})
			t.Logf("%s (%s):\n%s", st.name, mode, plan.text)
			if plan.seqScans[opts.OutboxTable()] || !plan.indexes[pkey] || plan.cost >= jitAboveCostDefault {
				t.Errorf("%s (%s): sequential scan %v, primary key used %v, cost %.0f", st.name, mode, plan.seqScans[opts.OutboxTable()], plan.indexes[pkey], plan.cost)
			}
		}
	}

	inboxPK := opts.TablePrefix + suffixInbox + "_pkey"
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explain(t, ctx, db, mode, inboxFindStatement(s.n().inbox), []any{"uuid-" + strconv.Itoa(total/2+3)})
		t.Logf("inbox entries (%s):\n%s", mode, plan.text)
		if plan.seqScans[opts.InboxTable()] || !plan.indexes[inboxPK] || plan.cost >= jitAboveCostDefault {
			t.Errorf("inbox entries (%s): sequential scan %v, primary key used %v, cost %.0f", mode, plan.seqScans[opts.InboxTable()], plan.indexes[inboxPK], plan.cost)
		}
	}
	got, err := s.FindInbox(ctx, "uuid-"+strconv.Itoa(total/2+3))
	if err != nil || len(got) != 1 {
		t.Fatalf("FindInbox = %v, %v; want one entry", got, err)
	}
}

// fillFind writes total rows (row g: id of millisecond base + g/100, lane g%64 for odd
// g, every 97th parked) and total inbox entries (entry g: consumer g%10, uuid-g).
func fillFind(t *testing.T, ctx context.Context, db *sql.DB, s *Store, base time.Time, total int) {
	t.Helper()
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+s.n().outbox+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	fill := `INSERT INTO ` + s.n().outbox + ` (id, message_uuid, lane, ordering_key, destination, headers, body, created_at, deliver_at, status)
		SELECT decode(lpad(to_hex($2::bigint + g / 100), 12, '0') || lpad(to_hex(g), 20, '0'), 'hex'), 'uuid-' || g,
			CASE WHEN g % 2 = 1 THEN g % 64 END, CASE WHEN g % 2 = 1 THEN 'key-' || (g % 640) END,
			'topic', decode('0100000000000000', 'hex'), convert_to(repeat('x', 200), 'UTF8'),
			$1::timestamptz, $1::timestamptz, CASE WHEN g % 97 = 0 THEN 'parked' ELSE 'pending' END
		FROM generate_series(1, $3::integer) AS g`
	if _, err := db.ExecContext(ctx, fill, base, base.UnixMilli(), total); err != nil {
		t.Fatal(err)
	}
	inbox := `INSERT INTO ` + s.n().inbox + ` (consumer, message_uuid, processed_at)
		SELECT 'consumer-' || (g % 10), 'uuid-' || g, $1::timestamptz FROM generate_series(1, $2::integer) AS g`
	if _, err := db.ExecContext(ctx, inbox, base, total); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{s.n().outbox, s.n().inbox} {
		if _, err := db.ExecContext(ctx, "ANALYZE "+tbl); err != nil {
			t.Fatal(err)
		}
	}
}

// checkFindPlans plans each statement of q as a custom and a generic plan.
func checkFindPlans(t *testing.T, ctx context.Context, db *sql.DB, s *Store, name string, q outbox.FindQuery, indexes []string) {
	t.Helper()
	sts := findStatements(s.n().outbox, s.opts.Lanes, q.WithDefaults())
	if len(sts) != len(indexes) {
		t.Fatalf("%s: %d statements, want %d", name, len(sts), len(indexes))
	}
	for i, st := range sts {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, ctx, db, mode, st.query, st.args)
			t.Logf("%s %d (%s):\n%s", name, i+1, mode, plan.text)
			if plan.seqScans[s.opts.OutboxTable()] {
				t.Errorf("%s %d (%s) scans the outbox sequentially", name, i+1, mode)
			}
			if plan.cost >= jitAboveCostDefault {
				t.Errorf("%s %d (%s) is estimated at %.0f, at or above jit_above_cost", name, i+1, mode, plan.cost)
			}
			used := false
			for _, ix := range strings.Split(indexes[i], "|") {
				used = used || plan.indexes[ix]
			}
			if !used {
				t.Errorf("%s %d (%s) does not use %s", name, i+1, mode, indexes[i])
			}
		}
	}
}
