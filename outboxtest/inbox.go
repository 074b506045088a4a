package outboxtest

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func inboxTests() []subtest {
	return append([]subtest{
		{"FirstThenDuplicate", testInboxFirstThenDuplicate},
		{"DuplicatesCountedOnCommit", testInboxDuplicatesCounted},
		{"RolledBackIsForgotten", testInboxRolledBack},
		{"SameTxAsBusinessAndOutbox", testInboxSameTx},
		{"ConcurrentWaitsForCommit", func(t *testing.T, h Harness) { testInboxConcurrent(t, h, true) }},
		{"ConcurrentWaitsForRollback", func(t *testing.T, h Harness) { testInboxConcurrent(t, h, false) }},
		{"ConcurrentDuplicatesBothCounted", testInboxConcurrentDuplicates},
		{"ExactKeys", testInboxExactKeys},
		{"InvalidKeys", testInboxInvalidKeys},
		{"Prune", testInboxPrune},
		{"Stats", testInboxStats},
		{"StatsBounded", testInboxStatsBounded},
		{"Lease", testInboxLease},
	}, inboxBeginTests()...)
}

// inboxEnv is a test's outbox whose store must implement outbox.Inbox.
func newInboxEnv(t *testing.T, h Harness) (*env, outbox.Inbox) {
	t.Helper()
	e := newEnv(t, h)
	in, ok := e.store.(outbox.Inbox)
	if !ok {
		t.Fatalf("%s store %T does not implement outbox.Inbox", h.Name, e.store)
	}
	return e, in
}

func (e *env) begin() *sql.Tx {
	e.t.Helper()
	tx, err := e.h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	return tx
}

// record records (consumer, uuid) in its own committed transaction and returns first.
func (e *env) record(in outbox.Inbox, consumer, uuid string, now time.Time) bool {
	e.t.Helper()
	tx := e.begin()
	first, err := in.RecordInbox(e.ctx, tx, consumer, uuid, now)
	if err != nil {
		_ = tx.Rollback()
		e.t.Fatalf("RecordInbox(%q, %q): %v", consumer, uuid, err)
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
	return first
}

func (e *env) inboxEntries(in outbox.Inbox) map[string]int64 {
	return e.inboxStat(in, func(c outbox.InboxConsumerStats) int64 { return c.Entries })
}

func (e *env) inboxDuplicates(in outbox.Inbox) map[string]int64 {
	return e.inboxStat(in, func(c outbox.InboxConsumerStats) int64 { return c.Duplicates })
}

// inboxStat maps each consumer of InboxStats to f of its stats.
func (e *env) inboxStat(in outbox.Inbox, f func(outbox.InboxConsumerStats) int64) map[string]int64 {
	e.t.Helper()
	st, err := in.InboxStats(e.ctx)
	if err != nil {
		e.t.Fatalf("InboxStats: %v", err)
	}
	out := map[string]int64{}
	for _, c := range st.Consumers {
		out[c.Consumer] = f(c)
	}
	return out
}

// A pair is new once per consumer; the same UUID is new for another consumer.
func testInboxFirstThenDuplicate(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	wantBool(t, "first record", e.record(in, "billing", "m-1", at(0)), nil, true)
	wantBool(t, "second record", e.record(in, "billing", "m-1", at(time.Second)), nil, false)
	wantBool(t, "other consumer", e.record(in, "shipping", "m-1", at(0)), nil, true)
	wantBool(t, "other message", e.record(in, "billing", "m-2", at(0)), nil, true)
	// A duplicate leaves the transaction usable: a statement after it and a commit work.
	tx := e.begin()
	first, err := in.RecordInbox(e.ctx, tx, "billing", "m-1", at(0))
	wantBool(t, "duplicate in an open transaction", first, err, false)
	if err := e.store.Insert(e.ctx, tx, []outbox.Record{NewRecord(at(0))}); err != nil {
		t.Fatalf("insert after a duplicate: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after a duplicate: %v", err)
	}
	if got := e.inboxEntries(in); got["billing"] != 2 || got["shipping"] != 1 {
		t.Fatalf("entries = %v; want billing 2, shipping 1", got)
	}
	if got := e.inboxDuplicates(in); got["billing"] != 2 || got["shipping"] != 0 {
		t.Fatalf("duplicates = %v; want billing 2, shipping 0", got)
	}
}

// A duplicate is counted on its entry when its transaction commits, not when it rolls
// back; the counts survive until the entry is pruned, and a pruned entry's count goes
// with it.
func testInboxDuplicatesCounted(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	e.record(in, "c", "m", at(0))
	e.record(in, "c", "old", at(-time.Hour))
	for range 3 {
		e.record(in, "c", "m", at(time.Hour))
	}
	e.record(in, "c", "old", at(time.Hour))
	tx := e.begin()
	first, err := in.RecordInbox(e.ctx, tx, "c", "m", at(time.Hour))
	wantBool(t, "duplicate in a transaction rolled back", first, err, false)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := e.inboxDuplicates(in); got["c"] != 4 {
		t.Fatalf("duplicates = %v; want c 4 (3 + 1 committed, 1 rolled back)", got)
	}
	n, err := in.PruneInbox(e.ctx, at(-time.Minute), 10)
	wantN(t, "PruneInbox", n, err, 1)
	if got := e.inboxDuplicates(in); got["c"] != 3 {
		t.Fatalf("duplicates after pruning an entry counted once = %v; want c 3", got)
	}
}

// A rolled-back record leaves nothing behind: the message is new again.
func testInboxRolledBack(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	tx := e.begin()
	first, err := in.RecordInbox(e.ctx, tx, "c", "m", at(0))
	wantBool(t, "record in a transaction", first, err, true)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wantBool(t, "record after rollback", e.record(in, "c", "m", at(0)), nil, true)
}

// The entry, the business row and the outgoing outbox row commit or vanish together.
func testInboxSameTx(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	business := e.createBusinessTable()
	for i, commit := range []bool{false, true} {
		tx := e.begin()
		first, err := in.RecordInbox(e.ctx, tx, "c", "m", at(0))
		wantBool(t, "record", first, err, true)
		if _, err := tx.ExecContext(e.ctx, "INSERT INTO "+business+" (id) VALUES ("+h.Placeholder(1)+")", i); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Insert(e.ctx, tx, []outbox.Record{NewRecord(at(0))}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if b, o, n := e.businessCount(), e.rawCount(e.opts.OutboxTable()), e.rawCount(e.opts.InboxTable()); b != 1 || o != 1 || n != 1 {
		t.Fatalf("after a rollback and a commit: %d business, %d outbox, %d inbox rows; want 1 each", b, o, n)
	}
}

// Two deliveries at once: the second waits for the first's transaction, then sees a
// duplicate (first committed) or records the message itself (first rolled back).
func testInboxConcurrent(t *testing.T, h Harness, commit bool) {
	e, in := newInboxEnv(t, h)
	tx1 := e.begin()
	first, err := in.RecordInbox(e.ctx, tx1, "c", "m", at(0))
	wantBool(t, "first delivery", first, err, true)

	tx2 := e.begin()
	defer tx2.Rollback() //nolint:errcheck // committed below on success
	done := e.recordAsync(in, tx2, "c", "m", at(time.Second))
	select {
	case r := <-done:
		_ = tx1.Rollback()
		t.Fatalf("second delivery returned (%v, %v) while the first's transaction was open; it must wait", r.first, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if commit {
		err = tx1.Commit()
	} else {
		err = tx1.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := e.awaitRecord(done, "second delivery")
	wantBool(t, "second delivery", r.first, r.err, !commit)
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := e.rawCount(e.opts.InboxTable()); n != 1 {
		t.Fatalf("%d inbox entries; want 1", n)
	}
	want := map[bool]int64{true: 1, false: 0}[commit]
	if got := e.inboxDuplicates(in); got["c"] != want {
		t.Fatalf("duplicates = %v; want c %d", got, want)
	}
}

// Two duplicates of a committed entry in open transactions at once: the second waits
// for the first (both raise the entry's count), then both report a duplicate and both
// counts stand.
func testInboxConcurrentDuplicates(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	e.record(in, "c", "m", at(0))
	tx1 := e.begin()
	defer tx1.Rollback() //nolint:errcheck // committed below on success
	first, err := in.RecordInbox(e.ctx, tx1, "c", "m", at(time.Second))
	wantBool(t, "first duplicate", first, err, false)
	tx2 := e.begin()
	defer tx2.Rollback() //nolint:errcheck // committed below on success
	done := e.recordAsync(in, tx2, "c", "m", at(2*time.Second))
	// The second may return at once or wait for the first's transaction, as the
	// engine's locks go; either way the first commits now.
	time.Sleep(100 * time.Millisecond)
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	r := e.awaitRecord(done, "second duplicate")
	wantBool(t, "second duplicate", r.first, r.err, false)
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := e.inboxDuplicates(in); got["c"] != 2 {
		t.Fatalf("duplicates = %v; want c 2", got)
	}
}

// recordResult is what a RecordInbox call run by recordAsync returned.
type recordResult struct {
	first bool
	err   error
}

// recordAsync runs RecordInbox in tx on a goroutine (it may wait for another
// transaction's lock) and delivers its result.
func (e *env) recordAsync(in outbox.Inbox, tx *sql.Tx, consumer, uuid string, now time.Time) <-chan recordResult {
	done := make(chan recordResult, 1)
	go func() {
		first, err := in.RecordInbox(e.ctx, tx, consumer, uuid, now)
		done <- recordResult{first, err}
	}()
	return done
}

// awaitRecord waits for recordAsync's result, at most 30 s after the transaction it
// waited for ended.
func (e *env) awaitRecord(done <-chan recordResult, what string) recordResult {
	e.t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		e.t.Fatalf("%s still waiting 30 s after the first's transaction ended", what)
	}
	return recordResult{}
}

// Keys compare byte for byte: case, trailing spaces, accents and the longest key.
func testInboxExactKeys(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	long := strings.Repeat("u", outbox.InboxKeyMaxBytes)
	for _, uuid := range []string{"abc", "ABC", "abc ", " abc", "abç", "abc\t", long} {
		wantBool(t, "record "+quote(uuid), e.record(in, "c", uuid, at(0)), nil, true)
	}
	for _, uuid := range []string{"abc", "ABC", "abc ", long} {
		wantBool(t, "record again "+quote(uuid), e.record(in, "c", uuid, at(0)), nil, false)
	}
	wantBool(t, "consumer differing in case", e.record(in, "C", "abc", at(0)), nil, true)
	wantBool(t, "longest consumer", e.record(in, strings.Repeat("c", outbox.InboxKeyMaxBytes), "abc", at(0)), nil, true)
}

// Empty, too long, NUL-holding and non-UTF-8 keys are refused with ErrInvalidRecord.
func testInboxInvalidKeys(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	for _, c := range []struct{ consumer, uuid string }{
		{"", "m"}, {"c", ""},
		{"c", strings.Repeat("u", outbox.InboxKeyMaxBytes+1)},
		{strings.Repeat("c", outbox.InboxKeyMaxBytes+1), "m"},
		{"c", "a\x00b"}, {"c", "a\xffb"},
	} {
		tx := e.begin()
		_, err := in.RecordInbox(e.ctx, tx, c.consumer, c.uuid, at(0))
		_ = tx.Rollback()
		if !errors.Is(err, outbox.ErrInvalidRecord) {
			t.Errorf("RecordInbox(%s, %s) = %v; want ErrInvalidRecord", quote(c.consumer), quote(c.uuid), err)
		}
	}
	if n := e.rawCount(e.opts.InboxTable()); n != 0 {
		t.Fatalf("%d entries after refused keys", n)
	}
}

// Prune deletes entries older than the instant, at most limit per call; a pruned
// message is new again (the retention window's trade-off).
func testInboxPrune(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	for i := range 5 {
		e.record(in, "c", "m"+string(rune('0'+i)), at(time.Duration(i)*time.Hour))
	}
	prune := func(before time.Time, limit, want int) {
		t.Helper()
		n, err := in.PruneInbox(e.ctx, before, limit)
		wantN(t, "PruneInbox", n, err, want)
	}
	prune(at(3*time.Hour), 0, 0)
	prune(at(3*time.Hour), 2, 2)
	prune(at(3*time.Hour), 2, 1) // m2; m3 processed exactly at the instant stays
	prune(at(3*time.Hour), 2, 0)
	if n := e.rawCount(e.opts.InboxTable()); n != 2 {
		t.Fatalf("%d entries left; want 2 (m3, m4)", n)
	}
	wantBool(t, "pruned message again", e.record(in, "c", "m0", at(5*time.Hour)), nil, true)
	wantBool(t, "kept message again", e.record(in, "c", "m3", at(5*time.Hour)), nil, false)
}

// Stats lists each consumer's entries and oldest instant, ordered by consumer.
func testInboxStats(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	st, err := in.InboxStats(e.ctx)
	if err != nil || len(st.Consumers) != 0 {
		t.Fatalf("empty inbox: %+v, %v", st, err)
	}
	e.record(in, "b", "1", at(2*time.Second+time.Microsecond))
	e.record(in, "b", "2", at(5*time.Second))
	e.record(in, "B", "1", at(time.Second))
	e.record(in, "a", "1", at(3*time.Second))
	e.record(in, "b", "1", at(6*time.Second))
	e.record(in, "b", "2", at(6*time.Second))
	e.record(in, "b", "2", at(7*time.Second))
	st, err = in.InboxStats(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []outbox.InboxConsumerStats{
		{Consumer: "B", Entries: 1, Oldest: at(time.Second)},
		{Consumer: "a", Entries: 1, Oldest: at(3 * time.Second)},
		{Consumer: "b", Entries: 2, Oldest: at(2*time.Second + time.Microsecond), Duplicates: 3},
	}
	if len(st.Consumers) != len(want) {
		t.Fatalf("stats = %+v; want %+v", st.Consumers, want)
	}
	for i := range want {
		g := st.Consumers[i]
		if g.Consumer != want[i].Consumer || g.Entries != want[i].Entries || g.Duplicates != want[i].Duplicates ||
			!g.Oldest.Equal(want[i].Oldest) || g.Oldest.Location() != time.UTC {
			t.Fatalf("stats[%d] = %+v; want %+v (UTC)", i, g, want[i])
		}
	}
	if st.Entries() != 4 || st.Duplicates() != 3 {
		t.Fatalf("Entries() = %d, Duplicates() = %d; want 4, 3", st.Entries(), st.Duplicates())
	}
}

// One holder at a time; the holder extends; an expired lease is taken over; release
// needs the holder's token.
func testInboxLease(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	a, b := outbox.NewToken(), outbox.NewToken()
	acquire := func(tok outbox.Token, now, until time.Time, want bool) {
		t.Helper()
		ok, err := in.AcquireInboxLease(e.ctx, outbox.InboxLeaseParams{Owner: "outboxtest", Token: tok, Now: now, Until: until})
		wantBool(t, "AcquireInboxLease", ok, err, want)
	}
	acquire(a, at(0), at(10*time.Second), true)
	acquire(b, at(time.Second), at(11*time.Second), false)
	acquire(a, at(2*time.Second), at(20*time.Second), true)   // extended
	acquire(a, at(3*time.Second), at(5*time.Second), true)    // never shortened
	acquire(b, at(15*time.Second), at(25*time.Second), false) // still a's until 20 s
	acquire(b, at(20*time.Second), at(30*time.Second), true)  // expired: taken over
	ok, err := in.ReleaseInboxLease(e.ctx, a)
	wantBool(t, "release with a stale token", ok, err, false)
	ok, err = in.ReleaseInboxLease(e.ctx, b)
	wantBool(t, "release by the holder", ok, err, true)
	acquire(a, at(21*time.Second), at(31*time.Second), true) // free at once
	if _, err := in.AcquireInboxLease(e.ctx, outbox.InboxLeaseParams{Token: outbox.Token{}, Now: at(0), Until: at(time.Second)}); err == nil {
		t.Fatal("AcquireInboxLease with a zero token: no error")
	}
}

// InboxStats reads a bounded part of a large inbox: a consumer with more than
// InboxStatsMaxEntries entries is Capped (a lower bound, no per-consumer oldest), at
// most InboxStatsMaxConsumers consumers are listed, the table's oldest entry is exact,
// and Entries is a lower bound.
func testInboxStatsBounded(t *testing.T, h Harness) {
	e, in := newInboxEnv(t, h)
	tx := e.begin()
	record := func(consumer, uuid string, at time.Time) {
		if _, err := in.RecordInbox(e.ctx, tx, consumer, uuid, at); err != nil {
			_ = tx.Rollback()
			t.Fatalf("RecordInbox: %v", err)
		}
	}
	for i := range outbox.InboxStatsMaxEntries + 2 {
		record("big", fmt.Sprintf("m%05d", i), at(time.Duration(i+10)*time.Second))
	}
	for i := range outbox.InboxStatsMaxConsumers {
		record(fmt.Sprintf("c%03d", i), "m", at(time.Second))
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := in.InboxStats(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Consumers) != outbox.InboxStatsMaxConsumers || !st.MoreConsumers || !st.Partial() {
		t.Fatalf("%d consumers, MoreConsumers %v; want %d listed and more", len(st.Consumers), st.MoreConsumers, outbox.InboxStatsMaxConsumers)
	}
	if !st.Oldest.Equal(at(time.Second)) {
		t.Errorf("Oldest = %s, want %s", fmtTime(st.Oldest), fmtTime(at(time.Second)))
	}
	var big *outbox.InboxConsumerStats
	for i := range st.Consumers {
		c := &st.Consumers[i]
		if c.Consumer == "big" {
			big = c
		} else if c.Capped || c.Entries != 1 || !c.Oldest.Equal(at(time.Second)) {
			t.Errorf("consumer %q: %+v; want 1 entry, exact", c.Consumer, *c)
		}
	}
	if big == nil || !big.Capped || big.Entries != outbox.InboxStatsMaxEntries+1 || !big.Oldest.IsZero() {
		t.Fatalf("the large consumer: %+v; want Capped with %d entries and no oldest", big, outbox.InboxStatsMaxEntries+1)
	}
	if n := st.Entries(); n < outbox.InboxStatsMaxEntries+outbox.InboxStatsMaxConsumers {
		t.Errorf("Entries() = %d, want at least the entries counted", n)
	}
}
