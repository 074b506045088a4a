package postgres_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// TestMigrateToSeq: a rows table of the schema before 2026-12-08 (no seq column, the
// lanes' index on (lane, id)) is refused by CreateSchema and MaxLane (the forwarder's
// startup check) with outbox.ErrSchemaOutdated naming MigrateScript, while writers may
// go on inserting; MigrateScript's statements keep every row, number each lane in id
// order (its order until then), and rows inserted afterwards follow them in their lane.
func TestMigrateToSeq(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	ctx := t.Context()
	s := newStore(t, db, outbox.Options{Lanes: 8})
	opts := s.Options()
	table := postgres.QualifiedTable(opts, opts.OutboxTable())
	for _, st := range []string{
		`DROP INDEX ` + postgres.QualifiedTable(opts, opts.TablePrefix+"outbox_lseq_ix"),
		`ALTER TABLE ` + table + ` DROP COLUMN seq`,
		`CREATE INDEX ` + opts.TablePrefix + `outbox_lane_ix ON ` + table + ` (lane, id) WHERE status = 'pending' AND lane IS NOT NULL`,
	} {
		if _, err := db.ExecContext(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	old := []outbox.Record{rec(base, "k", 8), rec(base, "k", 8), rec(base, "", 8)}
	for _, r := range old {
		insert(t, db, s, r) // a writer of either version goes on
	}
	s, err := postgres.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"CreateSchema": s.CreateSchema(ctx),
		"MaxLane":      func() error { _, err := s.MaxLane(ctx); return err }(),
	} {
		if !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), "MigrateScript") {
			t.Errorf("%s on the table without seq: %v; want ErrSchemaOutdated naming MigrateScript", what, err)
		}
	}
	script, err := postgres.MigrateScript(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, script); err != nil {
		t.Fatalf("MigrateScript: %v\n%s", err, script)
	}
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatalf("CreateSchema after the migration: %v", err)
	}
	late := rec(base, "k", 8)
	late.ID = outbox.ID{15: 1} // the smallest id of all: still last in its lane
	insert(t, db, s, late)
	lane := old[0].Lane
	head, err := s.Head(ctx, outbox.HeadQuery{Lane: lane, Limit: 10, Now: base.Add(time.Hour)}, nil)
	got := make([]outbox.ID, len(head))
	for i := range head {
		got[i] = head[i].ID
		if i > 0 && head[i].Seq <= head[i-1].Seq {
			t.Fatalf("seqs after the migration: %d then %d", head[i-1].Seq, head[i].Seq)
		}
	}
	if want := []outbox.ID{old[0].ID, old[1].ID, late.ID}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("lane %d after the migration: %v, %v; want %v", lane, got, err, want)
	}
	if n, err := s.Count(ctx, base.Add(time.Hour)); err != nil || n != 4 {
		t.Fatalf("Count after the migration = %d, %v; want 4", n, err)
	}
}
