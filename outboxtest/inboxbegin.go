package outboxtest

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// The rules of outbox.BeginRecordInbox (a store's InboxBeginner, or the fallback for a
// store without it). Each runs on the harness's DB and, when the harness has one, on a
// pool of the dialect's connector (Harness.OpenConnectorDB), where the record travels
// with the BEGIN.
func inboxBeginTests() []subtest {
	return []subtest{
		{"BeginRecordFirstThenDuplicate", eachBeginPool(testBeginRecordFirstThenDuplicate)},
		{"BeginRecordRolledBackIsForgotten", eachBeginPool(testBeginRecordRolledBack)},
		{"BeginRecordWaitsForCommit", eachBeginPool(func(t *testing.T, e *env, in outbox.Inbox, db *sql.DB) {
			testBeginRecordConcurrent(t, e, in, db, true)
		})},
		{"BeginRecordWaitsForRollback", eachBeginPool(func(t *testing.T, e *env, in outbox.Inbox, db *sql.DB) {
			testBeginRecordConcurrent(t, e, in, db, false)
		})},
		{"BeginRecordInvalidArguments", eachBeginPool(testBeginRecordInvalid)},
		{"BeginRecordOneRequest", testBeginRecordOneRequest},
	}
}

// Through the dialect's connector, BEGIN and record are one request to the server; on
// the plain driver's pool they are two. Both record the same way.
func testBeginRecordOneRequest(t *testing.T, h Harness) {
	if h.OpenCountingDB == nil {
		t.Skipf("%s has no connector that sends the record with the BEGIN", h.Name)
	}
	e, in := newInboxEnv(t, h)
	for _, c := range []struct {
		name      string
		connector bool
		want      int64
	}{{"driver", false, 2}, {"connector", true, 1}} {
		db, requests, err := h.OpenCountingDB(c.connector)
		if err != nil {
			t.Fatalf("OpenCountingDB(%v): %v", c.connector, err)
		}
		t.Cleanup(func() { _ = db.Close() })
		// The first transactions connect, prepare the statements on the connection and
		// take pgx stdlib's ping of a connection reused after more than a second.
		for range 2 {
			tx, _ := e.mustBeginRecord(in, db, "warm", c.name, at(0))
			_ = tx.Rollback()
		}
		for i, wantFirst := range []bool{true, false} {
			n0 := requests()
			tx, first := e.mustBeginRecord(in, db, "c", c.name, at(time.Duration(i)*time.Second))
			if n := requests() - n0; n != c.want {
				t.Errorf("%s: BeginRecordInbox sent %d requests; want %d", c.name, n, c.want)
			}
			wantBool(t, c.name+" delivery", first, nil, wantFirst)
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := e.inboxDuplicates(in); got["c"] != 2 {
		t.Fatalf("duplicates = %v; want c 2", got)
	}
}

// eachBeginPool runs fn on the harness's DB and on a pool of the dialect's connector.
func eachBeginPool(fn func(t *testing.T, e *env, in outbox.Inbox, db *sql.DB)) func(t *testing.T, h Harness) {
	return func(t *testing.T, h Harness) {
		t.Run("DB", func(t *testing.T) {
			e, in := newInboxEnv(t, h)
			fn(t, e, in, h.DB)
		})
		if h.OpenConnectorDB == nil {
			return
		}
		t.Run("connector", func(t *testing.T) {
			db, err := h.OpenConnectorDB()
			if err != nil {
				t.Fatalf("OpenConnectorDB: %v", err)
			}
			t.Cleanup(func() { _ = db.Close() })
			e, in := newInboxEnv(t, h)
			fn(t, e, in, db)
		})
	}
}

// beginRecord runs outbox.BeginRecordInbox on db.
func (e *env) beginRecord(in outbox.Inbox, db *sql.DB, consumer, uuid string, now time.Time) (*sql.Tx, bool, error) {
	return outbox.BeginRecordInbox(e.ctx, in, db, nil, consumer, uuid, now)
}

// mustBeginRecord is beginRecord that fails the test on an error.
func (e *env) mustBeginRecord(in outbox.Inbox, db *sql.DB, consumer, uuid string, now time.Time) (*sql.Tx, bool) {
	e.t.Helper()
	tx, first, err := e.beginRecord(in, db, consumer, uuid, now)
	if err != nil {
		e.t.Fatalf("BeginRecordInbox(%q, %q): %v", consumer, uuid, err)
	}
	return tx, first
}

// New once per consumer; a duplicate raises the count when it commits and leaves its
// transaction usable; an entry RecordInbox made is a duplicate for BeginRecordInbox.
func testBeginRecordFirstThenDuplicate(t *testing.T, e *env, in outbox.Inbox, db *sql.DB) {
	for i, want := range []bool{true, false, false} {
		tx, first := e.mustBeginRecord(in, db, "c", "m", at(time.Duration(i)*time.Second))
		wantBool(t, "delivery", first, nil, want)
		// The transaction is the handler's: its writes commit with the record.
		if err := e.store.Insert(e.ctx, tx, []outbox.Record{NewRecord(at(0))}); err != nil {
			_ = tx.Rollback()
			t.Fatalf("insert in the transaction: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	e.record(in, "other", "m", at(0))
	tx, first := e.mustBeginRecord(in, db, "other", "m", at(0))
	wantBool(t, "entry recorded by RecordInbox", first, nil, false)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := e.inboxEntries(in); got["c"] != 1 || got["other"] != 1 {
		t.Fatalf("entries = %v; want c 1, other 1", got)
	}
	if got := e.inboxDuplicates(in); got["c"] != 2 || got["other"] != 1 {
		t.Fatalf("duplicates = %v; want c 2, other 1", got)
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 3 {
		t.Fatalf("%d outbox rows; want the 3 the transactions inserted", n)
	}
}

// A rolled-back transaction takes its record with it: the next delivery is new.
func testBeginRecordRolledBack(t *testing.T, e *env, in outbox.Inbox, db *sql.DB) {
	tx, first := e.mustBeginRecord(in, db, "c", "m", at(0))
	wantBool(t, "first delivery", first, nil, true)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	tx, first = e.mustBeginRecord(in, db, "c", "m", at(time.Second))
	wantBool(t, "delivery after the rollback", first, nil, true)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := e.inboxDuplicates(in); got["c"] != 0 {
		t.Fatalf("duplicates = %v; want 0", got)
	}
}

// A second delivery begun while the first's transaction is open waits for it, then is
// a duplicate (first committed) or new (first rolled back).
func testBeginRecordConcurrent(t *testing.T, e *env, in outbox.Inbox, db *sql.DB, commit bool) {
	tx1, first := e.mustBeginRecord(in, db, "c", "m", at(0))
	wantBool(t, "first delivery", first, nil, true)
	type result struct {
		tx    *sql.Tx
		first bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		tx, first, err := e.beginRecord(in, db, "c", "m", at(time.Second))
		done <- result{tx, first, err}
	}()
	select {
	case r := <-done:
		_ = tx1.Rollback()
		if r.tx != nil {
			_ = r.tx.Rollback()
		}
		t.Fatalf("second delivery returned (%v, %v) while the first's transaction was open; it must wait", r.first, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	end := tx1.Rollback
	if commit {
		end = tx1.Commit
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("second delivery still waiting 30 s after the first's transaction ended")
	}
	wantBool(t, "second delivery", r.first, r.err, !commit)
	if err := r.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := e.rawCount(e.opts.InboxTable()); n != 1 {
		t.Fatalf("%d inbox entries; want 1", n)
	}
}

// Invalid keys and a nil db are errors before any I/O; no connection stays taken.
func testBeginRecordInvalid(t *testing.T, e *env, in outbox.Inbox, db *sql.DB) {
	for _, c := range []struct{ consumer, uuid string }{{"", "m"}, {"c", ""}, {"c\x00", "m"}, {"c", "\xff"}} {
		tx, _, err := e.beginRecord(in, db, c.consumer, c.uuid, at(0))
		if !errors.Is(err, outbox.ErrInvalidRecord) {
			t.Errorf("BeginRecordInbox(%q, %q): err = %v; want ErrInvalidRecord", c.consumer, c.uuid, err)
		}
		if tx != nil {
			_ = tx.Rollback()
			t.Errorf("BeginRecordInbox(%q, %q) returned a transaction with its error", c.consumer, c.uuid)
		}
	}
	if _, _, err := e.beginRecord(in, nil, "c", "m", at(0)); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("nil db: err = %v; want ErrInvalidArgument", err)
	}
	// The connector's pool is the test's own (the harness's DB serves parallel tests).
	if n := db.Stats().InUse; db != e.h.DB && n != 0 {
		t.Errorf("%d connections in use after the refused calls; want 0", n)
	}
	if n := e.rawCount(e.opts.InboxTable()); n != 0 {
		t.Errorf("%d inbox entries; want 0", n)
	}
}
