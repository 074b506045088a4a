package outboxtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
)

func insertTests() []subtest {
	return []subtest{
		{"Bulk10000", testInsertBulk},
		{"RollbackLeavesNothing", testInsertRollback},
		{"FailurePartWay", testInsertFailurePartWay},
		{"InvalidRecord", testInsertInvalid},
		{"LargeBodies", testInsertLargeBodies},
		{"EmptyAndDoneTx", testInsertEmptyAndDone},
		{"OddStringsRoundTripOrFail", testInsertOddStrings},
		{"BatchesRoundTrip", testInsertBatchesRoundTrip},
		{"OtherPoolTx", testInsertOtherPoolTx},
	}
}

// batchRows is the size of the batches of BatchesRoundTrip and OtherPoolTx: above the
// row counts at which a store changes how it sends a batch (a VALUES list, prepared row
// groups), with a tail.
const batchRows = 150

// mixedBatch returns n records created at created: rows with and without each optional
// column, empty headers and bodies, ordered rows of one key and scheduled ones, so
// that one batch mixes every column set a store may send differently.
func mixedBatch(created time.Time, n int) []outbox.Record {
	recs := make([]outbox.Record, n)
	for i := range recs {
		r := NewRecord(created)
		switch i % 4 {
		case 0:
			r.Transport, r.MessageType, r.TenantID = "other", "type é", "tenant 日本"
			r.Headers = headercodec.Encode(nil, []headercodec.Header{{Name: "q'uo\"te", Value: []byte{0, 1, '\\'}}})
		case 1:
			r.Headers, r.Body = headercodec.Encode(nil, nil), nil
		case 2:
			r = withKey(r, "batch-key")
		case 3:
			r.DeliverAt = created.Add(time.Second)
		}
		recs[i] = r
	}
	return recs
}

// Batches of every shape come back exactly as inserted, including batches after the
// first of their shape (a store may send those another way once it has seen one).
func testInsertBatchesRoundTrip(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var all []outbox.Record
	for k := range 3 {
		batch := mixedBatch(at(time.Duration(k)*time.Second), batchRows)
		e.insert(batch...)
		all = append(all, batch...)
		time.Sleep(100 * time.Millisecond) // let a store finish what it prepares in the background
	}
	// Rows sharing an instant with nanoseconds keep it to within a microsecond.
	ns := at(time.Minute).Add(999 * time.Nanosecond)
	last := make([]outbox.Record, batchRows)
	for i := range last {
		last[i] = NewRecord(ns)
	}
	e.insert(last...)

	got := map[outbox.ID]outbox.Record{}
	now := at(time.Hour)
	for _, lane := range []int{outbox.Unordered, lanes.Of("batch-key", testLanes)} {
		for _, r := range e.read(lane, outbox.ID{}, now, 4*batchRows) {
			got[r.ID] = r
		}
	}
	for _, w := range all {
		r, ok := got[w.ID]
		if !ok {
			t.Fatalf("row %s not read back", w.ID)
		}
		checkRecord(t, "Read", r, stored(w))
	}
	for _, w := range last {
		r, ok := got[w.ID]
		if !ok {
			t.Fatalf("row %s not read back", w.ID)
		}
		for _, c := range []struct {
			name string
			got  time.Time
		}{{"CreatedAt", r.CreatedAt}, {"DeliverAt", r.DeliverAt}} {
			if d := c.got.Sub(ns); d <= -time.Microsecond || d >= time.Microsecond {
				t.Fatalf("row %s: %s = %s, want %s to within a microsecond", w.ID, c.name, fmtTime(c.got), fmtTime(ns))
			}
		}
	}
}

// Insert works in a transaction of another *sql.DB over the same database (a writer
// with its own pool), also after batches through the store's own pool.
func testInsertOtherPoolTx(t *testing.T, h Harness) {
	e := newEnv(t, h)
	other, err := openClosable(h)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var want []outbox.ID
	for k := range 3 {
		batch := mixedBatch(at(time.Duration(k)*time.Second), batchRows)
		e.insert(batch...)
		want = append(want, ids(batch)...)
		time.Sleep(100 * time.Millisecond)
	}
	for k := range 2 {
		batch := mixedBatch(at(time.Duration(10+k)*time.Second), batchRows)
		tx, err := other.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.Insert(e.ctx, tx, batch); err != nil {
			_ = tx.Rollback()
			t.Fatalf("Insert in another pool's transaction (batch %d): %v", k, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		want = append(want, ids(batch)...)
	}
	got := map[outbox.ID]bool{}
	for _, lane := range []int{outbox.Unordered, lanes.Of("batch-key", testLanes)} {
		for _, r := range e.read(lane, outbox.ID{}, at(time.Hour), 6*batchRows) {
			got[r.ID] = true
		}
	}
	for _, id := range want {
		if !got[id] {
			t.Fatalf("row %s not stored", id)
		}
	}
}

type txExec interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// businessRow inserts business row id inside tx.
func (e *env) businessRow(tx txExec, id int) {
	e.t.Helper()
	if _, err := tx.ExecContext(e.ctx, "INSERT INTO "+e.table(e.opts.TablePrefix+"business")+" (id) VALUES ("+e.h.Placeholder(1)+")", id); err != nil {
		e.t.Fatalf("business insert: %v", err)
	}
}

// 10,000 rows with 4 KiB bodies and a business row commit together.
func testInsertBulk(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.createBusinessTable()
	const rows, size = 10_000, 4 << 10
	recs := make([]outbox.Record, rows)
	for i := range recs {
		recs[i] = NewRecord(at(time.Duration(i) * us))
		recs[i].Body = bulkBody(i, size)
		if i%3 == 0 {
			recs[i] = withKey(recs[i], fmt.Sprintf("key-%d", i%50))
		}
	}
	tx, err := h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.businessRow(tx, 1)
	start := time.Now()
	if err := e.store.Insert(e.ctx, tx, recs); err != nil {
		_ = tx.Rollback()
		t.Fatalf("Insert(%d rows): %v", rows, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	t.Logf("%d rows of %d bytes inserted and committed in %v", rows, size, time.Since(start).Round(time.Millisecond))
	if n := e.count(far); n != rows {
		t.Fatalf("Count = %d, want %d", n, rows)
	}
	if n := e.businessCount(); n != 1 {
		t.Fatalf("business rows = %d, want 1", n)
	}
	// Every row back, in ID order, with its own body.
	var got int
	byLane := map[int]int{}
	for _, lane := range lanesOf(recs) {
		var after outbox.ID
		for {
			page, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: lane, After: after, Now: far}, make([]outbox.Record, 2000))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if len(page) == 0 {
				break
			}
			for _, r := range page {
				if r.ID.Compare(after) <= 0 {
					t.Fatalf("lane %d: row %s after cursor %s", lane, r.ID, after)
				}
				after = r.ID
				i := int(r.CreatedAt.Sub(at(0)) / us)
				if i < 0 || i >= rows || recs[i].ID != r.ID {
					t.Fatalf("row %s: unexpected CreatedAt %s", r.ID, fmtTime(r.CreatedAt))
				}
				if !bytes.Equal(r.Body, recs[i].Body) || r.Lane != recs[i].Lane {
					t.Fatalf("row %d (%s): body or lane differs", i, r.ID)
				}
				got++
				byLane[lane]++
			}
		}
	}
	if got != rows {
		t.Fatalf("read back %d rows, want %d (per lane %v)", got, rows, byLane)
	}
}

func bulkBody(i, size int) []byte {
	b := make([]byte, size)
	copy(b, fmt.Sprintf("row %d|", i))
	for j := 16; j < size; j++ {
		b[j] = byte(i + j)
	}
	return b
}

func withKey(r outbox.Record, key string) outbox.Record {
	o := NewOrderedRecord(r.CreatedAt, key, testLanes)
	r.OrderingKey, r.Lane = o.OrderingKey, o.Lane
	return r
}

func lanesOf(recs []outbox.Record) []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range recs {
		if !seen[r.Lane] {
			seen[r.Lane] = true
			out = append(out, r.Lane)
		}
	}
	return out
}

// A rolled back unit leaves neither outbox rows nor business rows.
func testInsertRollback(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.createBusinessTable()
	tx, err := h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.businessRow(tx, 1)
	recs := make([]outbox.Record, 500)
	for i := range recs {
		recs[i] = NewRecord(at(0))
	}
	if err := e.store.Insert(e.ctx, tx, recs); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 0 {
		t.Fatalf("%d outbox rows after rollback", n)
	}
	if n := e.businessCount(); n != 0 {
		t.Fatalf("%d business rows after rollback", n)
	}
}

// An insert failing part way (duplicate id) rolls back with the whole unit, whether the
// duplicate comes in a later call or late in one large call.
func testInsertFailurePartWay(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.createBusinessTable()
	small := func(n int) []outbox.Record {
		recs := make([]outbox.Record, n)
		for i := range recs {
			recs[i] = NewRecord(at(0))
			recs[i].Body = recs[i].Body[:4]
		}
		return recs
	}
	first := small(3000)
	second := append(small(2), first[0])
	large := small(8000)
	large[len(large)-1].ID = large[0].ID
	cases := []struct {
		name  string
		calls [][]outbox.Record
	}{
		{"duplicate in a later call", [][]outbox.Record{first, second}},
		{"duplicate at the end of one large call", [][]outbox.Record{large}},
	}
	for i, c := range cases {
		tx, err := h.DB.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.businessRow(tx, i)
		var failed error
		for _, recs := range c.calls {
			if failed = e.store.Insert(e.ctx, tx, recs); failed != nil {
				break
			}
		}
		if failed == nil {
			_ = tx.Rollback()
			t.Fatalf("%s: Insert succeeded", c.name)
		}
		t.Logf("%s: %v", c.name, failed)
		if err := tx.Rollback(); err != nil {
			t.Fatalf("%s: rollback: %v", c.name, err)
		}
		if n := e.rawCount(e.opts.OutboxTable()); n != 0 {
			t.Fatalf("%s: %d outbox rows after rollback", c.name, n)
		}
		if n := e.businessCount(); n != 0 {
			t.Fatalf("%s: %d business rows after rollback", c.name, n)
		}
	}
}

// An invalid record fails the call with ErrInvalidRecord before anything is written:
// the transaction stays usable and commits without any of the batch.
func testInsertInvalid(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.createBusinessTable()
	cases := []struct {
		name    string
		mutate  func(*outbox.Record)
		mention string
	}{
		{"zero ID", func(r *outbox.Record) { r.ID = outbox.ID{} }, "id"},
		{"lane equal to Lanes", func(r *outbox.Record) { r.Lane = testLanes }, "lane"},
		{"lane far above Lanes", func(r *outbox.Record) { r.Lane = 1 << 30 }, "lane"},
		{"lane below Unordered", func(r *outbox.Record) { r.Lane = -2 }, "lane"},
	}
	for i, c := range cases {
		recs := []outbox.Record{NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))}
		c.mutate(&recs[2])
		tx, err := h.DB.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.businessRow(tx, i)
		err = e.store.Insert(e.ctx, tx, recs)
		if !errors.Is(err, outbox.ErrInvalidRecord) {
			_ = tx.Rollback()
			t.Fatalf("%s: Insert = %v; want an error wrapping outbox.ErrInvalidRecord", c.name, err)
		}
		if !strings.Contains(strings.ToLower(err.Error()), c.mention) {
			t.Errorf("%s: error %q does not name the problem (%q)", c.name, err, c.mention)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("%s: commit after the rejected insert: %v (the insert must fail before writing)", c.name, err)
		}
		if n := e.rawCount(e.opts.OutboxTable()); n != 0 {
			t.Fatalf("%s: %d outbox rows written", c.name, n)
		}
	}
	if n := e.businessCount(); n != int64(len(cases)) {
		t.Fatalf("business rows = %d, want %d", n, len(cases))
	}
}

// Inserting nothing is a no-op; inserting into a finished transaction is an error.
func testInsertEmptyAndDone(t *testing.T, h Harness) {
	e := newEnv(t, h)
	tx, err := h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Insert(e.ctx, tx, nil); err != nil {
		t.Fatalf("Insert(nil): %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Insert(e.ctx, tx, []outbox.Record{NewRecord(at(0))}); err == nil {
		t.Fatalf("Insert into a committed transaction succeeded")
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}

// A string the engine cannot hold as given (too long for its column, NUL, invalid
// UTF-8) either round-trips exactly or fails the insert: never truncated or altered.
func testInsertOddStrings(t *testing.T, h Harness) {
	e := newEnv(t, h)
	fields := []struct {
		name string
		set  func(*outbox.Record, string)
		get  func(*outbox.Record) string
	}{
		{"MessageUUID", func(r *outbox.Record, v string) { r.MessageUUID = v }, func(r *outbox.Record) string { return r.MessageUUID }},
		{"OrderingKey", func(r *outbox.Record, v string) { *r = withKey(*r, v) }, func(r *outbox.Record) string { return r.OrderingKey }},
		{"Transport", func(r *outbox.Record, v string) { r.Transport = v }, func(r *outbox.Record) string { return r.Transport }},
		{"Destination", func(r *outbox.Record, v string) { r.Destination = v }, func(r *outbox.Record) string { return r.Destination }},
		{"MessageType", func(r *outbox.Record, v string) { r.MessageType = v }, func(r *outbox.Record) string { return r.MessageType }},
		{"TenantID", func(r *outbox.Record, v string) { r.TenantID = v }, func(r *outbox.Record) string { return r.TenantID }},
	}
	values := []struct{ name, v string }{
		{"70000 characters", strings.Repeat("x", 70_000) + "é"},
		{"NUL", "a\x00b"},
		{"invalid UTF-8", "a\xffb"},
		{"emoji", "a😀b"},
		{"trailing spaces", "ab  "},
	}
	var report []string
	for _, f := range fields {
		for _, v := range values {
			r := NewRecord(at(0))
			f.set(&r, v.v)
			tx, err := h.DB.BeginTx(e.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.store.Insert(e.ctx, tx, []outbox.Record{NewRecord(at(0)), r}); err != nil {
				_ = tx.Rollback()
				report = append(report, f.name+" "+v.name+": rejected")
				if n := e.rawCount(e.opts.OutboxTable()); n != 0 {
					t.Fatalf("%s %s: rejected, yet %d rows stayed after rollback", f.name, v.name, n)
				}
				continue
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("%s %s: commit: %v", f.name, v.name, err)
			}
			found := false
			for _, g := range e.read(r.Lane, outbox.ID{}, far, 10) {
				if g.ID == r.ID {
					found = true
					if got := f.get(&g); got != v.v {
						t.Errorf("%s %s: stored as %s, want %s (never truncate or alter)", f.name, v.name, quote(got), quote(v.v))
					}
				}
			}
			if !found {
				t.Errorf("%s %s: inserted row not read back", f.name, v.name)
			}
			e.exec("DELETE FROM " + e.outboxTable())
		}
	}
	t.Logf("%s: %s", h.Name, strings.Join(report, "; "))
}

// One Insert of 24 rows of 1 MiB (more than a MariaDB packet holds by default) works:
// the store splits its statements by size, not only by row or parameter count.
func testInsertLargeBodies(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const rows, size = 24, 1 << 20
	recs := make([]outbox.Record, rows)
	for i := range recs {
		recs[i] = NewRecord(at(time.Duration(i) * us))
		recs[i].Body = bulkBody(i, size)
	}
	e.insert(recs...)
	var after outbox.ID
	n := 0
	for {
		page := e.read(outbox.Unordered, after, far, 4)
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			if n >= rows || r.ID != recs[n].ID || !bytes.Equal(r.Body, recs[n].Body) {
				t.Fatalf("row %d (%s) differs", n, r.ID)
			}
			n++
			after = r.ID
		}
	}
	if n != rows {
		t.Fatalf("read back %d rows, want %d", n, rows)
	}
}
