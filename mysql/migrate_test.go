package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// idKeyTable is the rows table as CreateScript made it before 2026-12-07: keyed by id,
// lane NULL for unordered rows, one secondary index.
const idKeyTable = `CREATE TABLE %s (
    id               BINARY(16)      NOT NULL,
    message_uuid     VARCHAR(255)    NOT NULL DEFAULT '',
    lane             INT             NULL,
    ordering_key     VARBINARY(1024) NULL,
    transport        VARCHAR(255)    NOT NULL DEFAULT '',
    destination      VARCHAR(1024)   NOT NULL,
    message_type     VARCHAR(255)    NULL,
    headers          LONGBLOB        NOT NULL,
    body             LONGBLOB        NOT NULL,
    tenant_id        VARCHAR(255)    NULL,
    created_at       DATETIME(6)     NOT NULL,
    deliver_at       DATETIME(6)     NOT NULL DEFAULT (created_at),
    attempts         INT             NOT NULL DEFAULT 0,
    last_error       TEXT            NULL,
    status           VARCHAR(16)     NOT NULL DEFAULT 'pending',
    claim_token      BINARY(16)      NULL,
    claim_expires_at DATETIME(6)     NULL,
    PRIMARY KEY (id),
    KEY ix_status_lane (status, lane, id),
    CHECK (lane >= 0),
    CHECK (status IN ('pending', 'parked'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// TestMigrateFromIDKey: a rows table keyed by id (the schema before 2026-12-07) is
// refused by Insert and MaxLane with outbox.ErrSchemaOutdated naming the migration,
// and the migration docs/operations.md gives (run here as written, the prefix
// replaced) keeps every row: pending and parked, unordered and ordered, each in its
// lane, readable by the store afterwards.
func TestMigrateFromIDKey(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	prefix := testenv.Prefix(t)
	opts := outbox.Options{TablePrefix: prefix, Lanes: 8}
	newOpts := outbox.Options{TablePrefix: prefix + "new_", Lanes: 8}
	dropTables(t, db, opts)
	dropTables(t, db, newOpts)
	table := mysql.QualifiedTable(opts, opts.OutboxTable())
	testenv.Cleanup(t, "drop the old table", func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+mysql.QualifiedTable(opts, opts.OutboxTable()+"_old"))
		return err
	})
	if _, err := db.ExecContext(ctx, strings.Replace(idKeyTable, "%s", table, 1)); err != nil {
		t.Fatal(err)
	}
	s, err := mysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	// CreateSchema makes the other tables (the rows table exists) and reports the rows
	// table as outdated rather than success (outboxctl schema apply said "applied").
	if err := s.CreateSchema(ctx); !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), "docs/operations.md") {
		t.Fatalf("CreateSchema over a table keyed by id = %v; want an error wrapping outbox.ErrSchemaOutdated naming the migration", err)
	}
	if _, err := s.Leases(ctx); err != nil {
		t.Fatalf("the lanes table after CreateSchema: %v", err)
	}
	// Rows as the earlier version wrote them: unordered (lane NULL) and lane 3, each
	// pending and parked.
	ins := "INSERT INTO " + table + " (id, message_uuid, lane, ordering_key, destination, headers, body, created_at, status) VALUES (?, ?, ?, ?, 't', ?, 'b', ?, ?)"
	type row struct {
		id     outbox.ID
		lane   any
		key    any
		status string
	}
	old := []row{{outbox.NewID(), nil, nil, "pending"}, {outbox.NewID(), 3, []byte("k3"), "pending"},
		{outbox.NewID(), nil, nil, "parked"}, {outbox.NewID(), 3, []byte("k3"), "parked"}}
	for i, r := range old {
		if _, err := db.ExecContext(ctx, ins, r.id[:], "u"+string(rune('0'+i)), r.lane, r.key, testHeaders, t0.Format("2006-01-02 15:04:05"), r.status); err != nil {
			t.Fatal(err)
		}
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Insert(ctx, tx, []outbox.Record{record("", 8, []byte("new"))})
	_ = tx.Rollback()
	const doc = "docs/operations.md#mysql-the-primary-key-lane-id"
	if !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), doc) {
		t.Fatalf("Insert into the table keyed by id: %v; want ErrSchemaOutdated naming %s", err, doc)
	}
	if _, err := s.MaxLane(ctx); !errors.Is(err, outbox.ErrSchemaOutdated) {
		t.Fatalf("MaxLane on the table keyed by id: %v; want ErrSchemaOutdated", err)
	}

	// The migration, as the operations guide writes it.
	ns, err := mysql.New(db, newOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range migrationStatements(t, prefix) {
		if _, err := db.ExecContext(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}

	s, err = mysql.New(db, opts) // a process started after the migration
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.MaxLane(ctx); err != nil || n != 3 {
		t.Fatalf("MaxLane after the migration = %d, %v; want 3", n, err)
	}
	later := t0.Add(time.Hour)
	un, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: later}, make([]outbox.Record, 10))
	if err != nil || len(un) != 1 || un[0].ID != old[0].id {
		t.Fatalf("unordered rows after the migration: %v, %v; want %s", ids(un), err, old[0].id)
	}
	l3, err := s.Head(ctx, outbox.HeadQuery{Lane: 3, Limit: 10, Now: later}, nil)
	if err != nil || len(l3) != 1 || l3[0].ID != old[1].id || l3[0].Lane != 3 {
		t.Fatalf("lane 3 after the migration: %v, %v; want %s", ids(l3), err, old[1].id)
	}
	parked, err := s.ListParked(ctx, outbox.ParkedQuery{Limit: 10})
	if err != nil || len(parked) != 2 || parked[0].Lane != outbox.Unordered || parked[1].Lane != 3 {
		t.Fatalf("parked rows after the migration: %+v, %v; want the unordered one and lane 3's", parked, err)
	}
	if n, err := s.Requeue(ctx, outbox.ParkedFilter{All: true}); err != nil || n != 2 {
		t.Fatalf("Requeue = %d, %v; want 2", n, err)
	}
	// Requeued rows are due at the server's now.
	if l3, err = s.Head(ctx, outbox.HeadQuery{Lane: 3, Limit: 10, Now: time.Now().Add(time.Hour)}, nil); err != nil || len(l3) != 2 {
		t.Fatalf("lane 3 after the requeue: %v, %v; want both rows", ids(l3), err)
	}
}

// TestMigrateToSeq: a rows table of the schema before 2026-12-08 (primary key (lane,
// id), no seq) is refused by CreateSchema, Insert and MaxLane with
// outbox.ErrSchemaOutdated naming MigrateScript; MigrateScript's statements keep every
// row, number each lane in id order (its order until then), and rows inserted afterwards
// follow them in their lane.
func TestMigrateToSeq(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: 8}
	dropTables(t, db, opts)
	s, err := mysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	table := mysql.QualifiedTable(opts, opts.OutboxTable())
	for _, st := range []string{"MODIFY seq BIGINT NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY (lane, id), DROP KEY ix_seq", "DROP COLUMN seq"} {
		if _, err := db.ExecContext(ctx, "ALTER TABLE "+table+" "+st); err != nil {
			t.Fatal(err)
		}
	}
	// Rows as the previous version wrote them: lane 3 in id order (two pending, one
	// parked at -3 - 3), one unordered.
	ins := "INSERT INTO " + table + " (id, message_uuid, lane, ordering_key, destination, headers, body, created_at, status) VALUES (?, 'u', ?, ?, 't', ?, 'b', ?, ?)"
	l3 := []outbox.ID{outbox.NewID(), outbox.NewID(), outbox.NewID()}
	un := outbox.NewID()
	for i, r := range []struct {
		id     outbox.ID
		lane   int
		status string
	}{{l3[0], 3, "pending"}, {l3[1], -6, "parked"}, {l3[2], 3, "pending"}, {un, -1, "pending"}} {
		key := any([]byte("k"))
		if r.lane == -1 {
			key = nil
		}
		if _, err := db.ExecContext(ctx, ins, r.id[:], r.lane, key, testHeaders, t0.Format("2006-01-02 15:04:05"), r.status); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	s, err = mysql.New(db, opts) // a new process: nothing cached
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"CreateSchema": s.CreateSchema(ctx),
		"Insert":       insertOne(ctx, db, s, record("k", 8, []byte("new"))),
		"MaxLane":      func() error { _, err := s.MaxLane(ctx); return err }(),
	} {
		if !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), "MigrateScript") {
			t.Errorf("%s on the table without seq: %v; want ErrSchemaOutdated naming MigrateScript", what, err)
		}
	}
	script, err := mysql.MigrateScript(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range strings.Split(strings.TrimSpace(script), ";\n") {
		if _, err := db.ExecContext(ctx, strings.TrimSuffix(st, ";")); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	s, err = mysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatalf("CreateSchema after the migration: %v", err)
	}
	later := time.Now().Add(time.Hour) // the requeued row is due at the database's now
	if n, err := s.Requeue(ctx, outbox.ParkedFilter{All: true}); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v; want 1", n, err)
	}
	late := record("k", 8, []byte("late"))
	late.Lane, late.CreatedAt = 3, t0
	late.ID = outbox.ID{} // the smallest id of all: still last in its lane
	late.ID[15] = 1
	if err := insertOne(ctx, db, s, late); err != nil {
		t.Fatal(err)
	}
	head, err := s.Head(ctx, outbox.HeadQuery{Lane: 3, Limit: 10, Now: later}, nil)
	want := []outbox.ID{l3[0], l3[1], l3[2], late.ID}
	if err != nil || !slices.Equal(ids(head), want) {
		t.Fatalf("lane 3 after the migration: %v, %v; want %v", ids(head), err, want)
	}
	for i := 1; i < len(head); i++ {
		if head[i].Seq <= head[i-1].Seq {
			t.Fatalf("lane 3's seqs after the migration: %d then %d", head[i-1].Seq, head[i].Seq)
		}
	}
	got, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: later}, make([]outbox.Record, 10))
	if err != nil || len(got) != 1 || got[0].ID != un {
		t.Fatalf("unordered rows after the migration: %v, %v; want %s", ids(got), err, un)
	}
}

// insertOne inserts rec through s in one committed transaction.
func insertOne(ctx context.Context, db *sql.DB, s *mysql.Store, rec outbox.Record) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := s.Insert(ctx, tx, []outbox.Record{rec}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// migrationStatements returns the SQL block of the operations guide's MySQL migration,
// its "orders_" prefix replaced by prefix, one statement per element.
func migrationStatements(t *testing.T, prefix string) []string {
	t.Helper()
	guide, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(guide), "### MySQL: the primary key (lane, id)")
	if !ok {
		t.Fatal("docs/operations.md has no section \"MySQL: the primary key (lane, id)\"")
	}
	_, block, ok := strings.Cut(section, "```sql\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("the migration section has no sql block")
	}
	var out []string
	for _, st := range strings.Split(block, ";") {
		if st = strings.TrimSpace(st); st != "" {
			out = append(out, strings.ReplaceAll(st, "orders_", prefix))
		}
	}
	return out
}

func ids(recs []outbox.Record) []outbox.ID {
	out := make([]outbox.ID, len(recs))
	for i := range recs {
		out[i] = recs[i].ID
	}
	return out
}
