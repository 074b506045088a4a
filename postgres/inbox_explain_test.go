package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// TestExplainInbox: recording a message walks the primary key only, whatever the
// table's size. Over a filled inbox (200,000 entries; 10,000,000 under
// OUTBOX_TEST_FULL=1) the record INSERT arbitrates on the primary key, and a new entry
// and a duplicate each touch a handful of buffers (EXPLAIN ANALYZE, BUFFERS), not a
// number growing with the table; retention's DELETE walks the age index (custom and
// generic plans) without a sequential scan, and so do InboxStats' bounded reads.
var inboxT0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

func TestExplainInbox(t *testing.T) {
	if testing.Short() {
		t.Skip("short: inserts 200,000 entries")
	}
	total := 200_000
	if os.Getenv("OUTBOX_TEST_FULL") == "1" {
		total = 10_000_000
	}
	db, err := sql.Open("pgx", testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t)}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tbl := range opts.TableNames() {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+QualifiedTable(opts, tbl)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := db.ExecContext(ctx, `INSERT INTO `+s.n().inbox+` (consumer, message_uuid, processed_at)
		SELECT 'consumer-' || (g % 10), 'uuid-' || g, $1::timestamptz - (g % 864000) * interval '1 second'
		FROM generate_series(0, $2 - 1) AS g`, inboxT0, total); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE "+s.n().inbox); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %d entries in %s", total, time.Since(start).Round(time.Millisecond))

	existing := fmt.Sprintf("uuid-%d", total/2+3) // of consumer-3
	for _, c := range []struct {
		name, uuid string
		inserted   float64
	}{{"duplicate", existing, 0}, {"new entry", "a-new-uuid", 1}} {
		node := explainRecord(t, ctx, db, s, "consumer-3", c.uuid)
		hit, _ := node["Shared Hit Blocks"].(float64)
		read, _ := node["Shared Read Blocks"].(float64)
		arbiters, _ := node["Conflict Arbiter Indexes"].([]any)
		t.Logf("record %s over %d entries: %v tuples inserted, %v conflicting, arbiter %v, %v+%v buffers (hit+read)",
			c.name, total, node["Tuples Inserted"], node["Conflicting Tuples"], arbiters, hit, read)
		if node["Tuples Inserted"] != c.inserted {
			t.Errorf("record %s inserted %v tuples; want %v", c.name, node["Tuples Inserted"], c.inserted)
		}
		if len(arbiters) != 1 || arbiters[0] != opts.TablePrefix+suffixInbox+"_pkey" {
			t.Errorf("record %s arbitrates on %v; want the primary key", c.name, arbiters)
		}
		if hit+read > 30 {
			t.Errorf("record %s touched %v buffers over %d entries", c.name, hit+read, total)
		}
	}
	// InboxStats' reads: the consumer walk and a consumer's figures use the primary key,
	// the oldest entry the age index; none scans the table.
	pkey, age := opts.TablePrefix+suffixInbox+"_pkey", opts.TablePrefix+suffixInboxAge
	for _, q := range []struct {
		name, query, index string
		args               []any
	}{
		{"next consumer", s.q.inboxNextConsumer, pkey, []any{"'consumer-3'"}},
		{"consumer figures", s.q.inboxConsumer, pkey, []any{"'consumer-3'", outbox.InboxStatsMaxEntries + 1}},
		{"oldest entry", s.q.inboxOldest, age, nil},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, ctx, db, mode, q.query, q.args)
			t.Logf("InboxStats %s (%s):\n%s", q.name, mode, plan.text)
			if plan.seqScans[opts.InboxTable()] || !plan.indexes[q.index] {
				t.Errorf("InboxStats %s (%s) does not walk %s", q.name, mode, q.index)
			}
		}
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		plan := explain(t, ctx, db, mode, s.q.inboxPrune, []any{inboxT0.Add(-9 * 24 * time.Hour), 1000})
		t.Logf("prune (%s):\n%s", mode, plan.text)
		if plan.seqScans[opts.InboxTable()] || !plan.indexes[opts.TablePrefix+suffixInboxAge] {
			t.Errorf("prune (%s) does not walk %s", mode, opts.TablePrefix+suffixInboxAge)
		}
	}
}

// explainRecord runs the record INSERT under EXPLAIN (ANALYZE, BUFFERS) in a
// transaction it rolls back, and returns the plan's top node.
func explainRecord(t *testing.T, ctx context.Context, db *sql.DB, s *Store, consumer, uuid string) map[string]any {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	var raw []byte
	if err := tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.q.inboxRecord, consumer, uuid, inboxT0).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN JSON: %v", err)
	}
	return doc[0].Plan
}
