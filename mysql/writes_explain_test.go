package mysql_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// TestExplainWritesByIDs: the writes by id list (complete, renew, release) walk the
// primary key for their ids on a small table too, where the optimizer would rather
// scan it; a scan in REPEATABLE READ locks every row it reads until the commit, so
// concurrent SKIP LOCKED claims would pass over fresh pending rows (seen as an empty
// sweep on Oracle MySQL: TestUnorderedCursorFindsLateLowerIDs in package forwarder).
func TestExplainWritesByIDs(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	s := newStore(t, db, 8)
	recs := make([]outbox.Record, 300)
	for i := range recs {
		recs[i] = outbox.Record{ID: outbox.NewID(), MessageUUID: fmt.Sprint(i), Lane: outbox.Unordered, Destination: "t",
			Headers: headercodec.EncodeMetadata(nil, nil), Body: []byte("x"), CreatedAt: time.Now().UTC()}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, tx, recs); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ids := make([]outbox.ID, 0, 10)
	for _, r := range recs[200:210] {
		ids = append(ids, r.ID)
	}
	format := ""
	if !isMariaDB(t, db) {
		format = "FORMAT=TRADITIONAL " // FORMAT=TREE cannot show a DELETE
	}
	st := mysql.WritesByIDs(s, ids, outbox.NewToken(), time.Now(), 3)
	names := make([]string, 0, len(st))
	for n := range st {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		plan := explain(t, ctx, db, format+st[name])
		t.Logf("%s: type=%s key=%s rows=%s", name, plan["type"], plan["key"], plan["rows"])
		// ix_seq's entries hold the whole key (seq, lane, id): MariaDB takes it for a
		// DELETE pinned by ORDER BY seq, id; its ranges are the rows' points as well.
		fullKey := plan["key"] == "PRIMARY" || (plan["key"] == "ix_seq" && plan["key_len"] == "28")
		if !fullKey || plan["type"] != "range" {
			t.Errorf("%s does not walk the key for its ids: %v", name, plan)
		}
	}
}
