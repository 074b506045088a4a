package postgres

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// TestExplainDashboardReads: the row reads of package dashboard walk an index on a
// table of 100,000 rows, 10 % of them parked: a page of parked rows (Store.ListParked,
// any key and one key), and the lane reads of its finder (the head-of-lane read is
// TestExplainHotReads'). None scans the table or sorts the parked rows (a key's page may
// sort that key's rows). (Its
// counts are Stats and Count, which read every pending row by definition; package
// dashboard shares one read of them among all its viewers.)
func TestExplainDashboardReads(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
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
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fill := `INSERT INTO ` + s.n().outbox + ` (id, message_uuid, lane, ordering_key, destination, headers, body, created_at, deliver_at, status)
		SELECT decode(lpad(to_hex(g), 32, '0'), 'hex'), 'uuid-' || g,
			CASE WHEN g % 2 = 1 THEN g % 64 END, CASE WHEN g % 2 = 1 THEN 'key-' || (g % 640) END,
			'topic', decode('0100000000000000', 'hex'), convert_to(repeat('x', 200), 'UTF8'),
			$1::timestamptz, $1::timestamptz, CASE WHEN g % 10 = 0 THEN 'parked' ELSE 'pending' END
		FROM generate_series(1, 100000) AS g`
	if _, err := db.ExecContext(ctx, fill, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE "+s.n().outbox); err != nil {
		t.Fatal(err)
	}
	zero := outbox.ID{}
	for _, st := range []struct {
		name, query, index string
		args               []any
	}{
		{"parked page", s.q.parked[keyAny], opts.TablePrefix + suffixParkedIx, []any{zero[:], 50, 1024}},
		{"parked page of one key", s.q.parked[keyOne], opts.TablePrefix + suffixParkKeyIx, []any{zero[:], 50, "'key-1'", 1024}},
		{"parked row by id", s.q.parked[keyAny], opts.TablePrefix + suffixParkedIx, []any{zero[:], 1, 1024}},
		{"eligible rows of a lane", s.q.laneRun, opts.TablePrefix + suffixLaneIx, []any{5, int64(0), 50}},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explain(t, ctx, db, mode, st.query, st.args)
			t.Logf("%s (%s):\n%s", st.name, mode, plan.text)
			// A key's page may sort that key's parked rows (found through its index),
			// never the parked rows of every key.
			sorts := plan.sortsBacklog && st.name != "parked page of one key"
			if plan.seqScans[opts.OutboxTable()] || sorts || !plan.indexes[st.index] {
				t.Errorf("%s (%s): want a walk of %s in id order, got\n%s", st.name, mode, st.index, plan.text)
			}
		}
	}
}
