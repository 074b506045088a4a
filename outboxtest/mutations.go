package outboxtest

import (
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func renewTests() []subtest {
	return []subtest{
		{"Extends", testRenewExtends},
		{"NeverShortens", testRenewNeverShortens},
		{"SameExpiryCounts", testRenewSameExpiry},
		{"StaleOrExpiredToken", testRenewStale},
		{"OnlyIDs", testRenewOnlyIDs},
		{"LeaseFenced", testRenewLeaseFenced},
	}
}

func completeTests() []subtest {
	return []subtest{
		{"LiveToken", testCompleteLive},
		{"StaleOrExpiredToken", testCompleteStale},
		{"LeaseFenced", testCompleteLeaseFenced},
	}
}

func releaseTests() []subtest {
	return []subtest{
		{"LiveToken", testReleaseLive},
		{"OnlyIDs", testReleaseOnlyIDs},
		{"StaleOrExpiredToken", testReleaseStale},
		{"LeaseFenced", testReleaseLeaseFenced},
	}
}

func failTests() []subtest {
	return []subtest{
		{"LiveToken", testFailLive},
		{"RetryAt", testFailRetryAt},
		{"Park", testFailPark},
		{"StaleOrExpiredToken", testFailStale},
		{"LeaseFenced", testFailLeaseFenced},
	}
}

func parkTests() []subtest {
	return []subtest{
		{"Unclaimed", testParkUnclaimed},
		{"LiveClaimRefused", testParkLiveClaim},
	}
}

func (e *env) renew(r outbox.RenewParams) int {
	e.t.Helper()
	n, err := e.store.Renew(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Renew: %v", err)
	}
	return n
}

// expiresAt checks, through eligibility, that the unordered rows ids are held exactly
// until until: not eligible a microsecond before, eligible at it.
func (e *env) expiresAt(what string, lane int, want []outbox.ID, until time.Time) {
	e.t.Helper()
	before := e.readIDs(lane, until.Add(-us))
	for _, id := range want {
		for _, b := range before {
			if b == id {
				e.t.Fatalf("%s: row %s is eligible a microsecond before %s", what, id, fmtTime(until))
			}
		}
	}
	got := e.readIDs(lane, until)
	for _, id := range want {
		found := false
		for _, g := range got {
			found = found || g == id
		}
		if !found {
			e.t.Fatalf("%s: row %s is not eligible at %s (claim expiry moved)", what, id, fmtTime(until))
		}
	}
}

// Renew moves a live claim's expiry later and reports the claims it found.
func testRenewExtends(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2 := NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2)
	tok, _ := e.claimUnordered(10, at(0), at(time.Minute))
	n := e.renew(outbox.RenewParams{Token: tok, Now: at(30 * time.Second), Until: at(2 * time.Minute), Lane: outbox.Unordered})
	if n != 2 {
		t.Fatalf("Renew = %d, want 2", n)
	}
	e.expiresAt("renewed claim", outbox.Unordered, idsOf(r1, r2), at(2*time.Minute))
}

// Renew to an earlier expiry keeps the later one, and still reports the live claim.
func testRenewNeverShortens(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	tok, _ := e.claimUnordered(10, at(0), at(time.Minute))
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok, Now: at(5 * time.Second), Until: at(10 * time.Second)}); n != 1 {
		t.Fatalf("Renew to an earlier expiry = %d, want 1 (the claim is live)", n)
	}
	e.expiresAt("claim after a shortening renew", outbox.Unordered, idsOf(r), at(time.Minute))
}

// Renew to the same expiry reports the live claim although no value changes (no
// reliance on affected-row counts).
func testRenewSameExpiry(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2 := NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2)
	tok, _ := e.claimUnordered(10, at(0), at(time.Minute))
	for i := 0; i < 2; i++ {
		if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok, Now: at(time.Second), Until: at(time.Minute)}); n != 2 {
			t.Fatalf("Renew to the same expiry (call %d) = %d, want 2", i+1, n)
		}
	}
	e.expiresAt("claim", outbox.Unordered, idsOf(r1, r2), at(time.Minute))
}

// Unknown, expired and replaced tokens find nothing and extend nothing.
func testRenewStale(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	until := at(time.Minute)
	tok, _ := e.claimUnordered(10, at(0), until)
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: outbox.NewToken(), Now: at(time.Second), Until: at(time.Hour)}); n != 0 {
		t.Fatalf("Renew with an unknown token = %d, want 0", n)
	}
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok, Now: until, Until: at(time.Hour)}); n != 0 {
		t.Fatalf("Renew of a claim expiring exactly at now = %d, want 0", n)
	}
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r), Now: until.Add(time.Second), Until: at(time.Hour)}); n != 0 {
		t.Fatalf("Renew (with ids) of an expired claim = %d, want 0", n)
	}
	sameIDs(t, "row after renewing an expired claim", e.readIDs(outbox.Unordered, until), idsOf(r))
	tok2, _ := e.claimUnordered(10, until, at(2*time.Minute))
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok, Now: until, Until: at(time.Hour)}); n != 0 {
		t.Fatalf("Renew with the replaced token = %d, want 0", n)
	}
	e.expiresAt("new claim after a stale renew", outbox.Unordered, idsOf(r), at(2*time.Minute))
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok2, Now: until, Until: at(3 * time.Minute)}); n != 1 {
		t.Fatalf("Renew with the new token = %d, want 1", n)
	}
}

// With IDs, only those rows of the claim are renewed.
func testRenewOnlyIDs(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2, r3, other := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2, r3, other)
	tok, got := e.claimUnordered(3, at(0), at(time.Minute))
	sameIDs(t, "claim", ids(got), idsOf(r1, r2, r3))
	if n := e.renew(outbox.RenewParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r2, other), Now: at(time.Second), Until: at(time.Hour)}); n != 1 {
		t.Fatalf("Renew of r2 and an unclaimed row = %d, want 1", n)
	}
	sameIDs(t, "rows at the first expiry", e.readIDs(outbox.Unordered, at(time.Minute)), idsOf(r1, r3, other))
	e.expiresAt("renewed row", outbox.Unordered, idsOf(r2), at(time.Hour))
}

// Lane renewals need the live lease of the lane.
func testRenewLeaseFenced(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(2, 2)
	expired := e.acquireTTL(2, shortTTL)
	tok, got := e.claimLane(2, 10, expired, at(0), at(time.Minute))
	sameIDs(t, "claim", ids(got), ids(recs))
	e.waitExpired(2, expired)
	for _, c := range []struct {
		name  string
		lease outbox.Token
		now   time.Time
	}{
		{"no lease", outbox.Token{}, at(time.Second)},
		{"wrong lease", outbox.NewToken(), at(time.Second)},
		{"expired lease", expired, at(time.Second)},
	} {
		if n := e.renew(outbox.RenewParams{Token: tok, Now: c.now, Until: at(time.Hour), Lane: 2, Lease: c.lease}); n != 0 {
			t.Fatalf("Renew with %s = %d, want 0", c.name, n)
		}
	}
	lease := e.acquire(2)
	if n := e.renew(outbox.RenewParams{Token: tok, Now: at(time.Second), Until: at(2 * time.Minute), Lane: 2, Lease: lease}); n != 2 {
		t.Fatalf("Renew with the live lease = %d, want 2", n)
	}
	e.expiresAt("lane claim", 2, ids(recs), at(2*time.Minute))
}

func (e *env) complete(c outbox.CompleteParams) int {
	e.t.Helper()
	n, err := e.store.Complete(e.ctx, c)
	if err != nil {
		e.t.Fatalf("Complete: %v", err)
	}
	return n
}

// Complete deletes exactly the listed rows the live token holds.
func testCompleteLive(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2, r3, r4 := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2, r3, r4)
	tok, _ := e.claimUnordered(3, at(0), at(time.Minute))
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r1, r2, r4), Now: at(time.Second)}); n != 2 {
		t.Fatalf("Complete(r1, r2, unclaimed r4) = %d, want 2", n)
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 2 {
		t.Fatalf("%d rows left, want 2 (r3 and r4)", n)
	}
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r1), Now: at(time.Second)}); n != 0 {
		t.Fatalf("Complete of a deleted row = %d, want 0", n)
	}
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, Now: at(time.Second)}); n != 0 {
		t.Fatalf("Complete without ids = %d, want 0", n)
	}
	sameIDs(t, "rows after the claim expired", e.readIDs(outbox.Unordered, at(time.Minute)), idsOf(r3, r4))
}

// A wrong, expired or replaced token deletes nothing and says so.
func testCompleteStale(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	until := at(time.Minute)
	tok, _ := e.claimUnordered(1, at(0), until)
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: outbox.NewToken(), IDs: idsOf(r), Now: at(time.Second)}); n != 0 {
		t.Fatalf("Complete with a wrong token = %d, want 0", n)
	}
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r), Now: until}); n != 0 {
		t.Fatalf("Complete with a claim expiring exactly at now = %d, want 0", n)
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 1 {
		t.Fatalf("row count %d after stale completes, want 1", n)
	}
	tok2, _ := e.claimUnordered(1, until, at(2*time.Minute))
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r), Now: until}); n != 0 {
		t.Fatalf("Complete with the replaced token = %d, want 0", n)
	}
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok2, IDs: idsOf(r), Now: until}); n != 1 {
		t.Fatalf("Complete with the live token = %d, want 1", n)
	}
}

// Lane completions need the live lease of the lane.
func testCompleteLeaseFenced(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(6, 2)
	expired := e.acquireTTL(6, shortTTL)
	tok, _ := e.claimLane(6, 10, expired, at(0), at(time.Minute))
	e.waitExpired(6, expired)
	for _, c := range []struct {
		name  string
		lease outbox.Token
		now   time.Time
	}{
		{"no lease", outbox.Token{}, at(time.Second)},
		{"wrong lease", outbox.NewToken(), at(time.Second)},
		{"expired lease", expired, at(time.Second)},
	} {
		if n := e.complete(outbox.CompleteParams{Token: tok, IDs: ids(recs), Now: c.now, Lane: 6, Lease: c.lease}); n != 0 {
			t.Fatalf("Complete with %s = %d, want 0", c.name, n)
		}
		if n := e.complete(outbox.CompleteParams{IDs: ids(recs), Now: c.now, Lane: 6, Lease: c.lease}); n != 0 {
			t.Fatalf("Complete of a lane run with %s = %d, want 0", c.name, n)
		}
	}
	lease := e.acquire(6)
	if n := e.rawCount(e.opts.OutboxTable()); n != 2 {
		t.Fatalf("row count %d after fenced completes, want 2", n)
	}
	if n := e.complete(outbox.CompleteParams{Token: tok, IDs: ids(recs), Now: at(time.Second), Lane: 6, Lease: lease}); n != 2 {
		t.Fatalf("Complete with the live lease = %d, want 2", n)
	}
}

func (e *env) fail(f outbox.FailParams) bool {
	e.t.Helper()
	ok, err := e.store.Fail(e.ctx, f)
	if err != nil {
		e.t.Fatalf("Fail: %v", err)
	}
	return ok
}

// readOne reads the single eligible unordered row at now, or fails.
func (e *env) readOne(lane int, now time.Time) outbox.Record {
	e.t.Helper()
	got := e.read(lane, outbox.ID{}, now, 10)
	if len(got) != 1 {
		e.t.Fatalf("Read at %s = %d rows, want 1", fmtTime(now), len(got))
	}
	return got[0]
}

// Fail with the live token: attempts+1, error stored, claim released; a repeat with the
// released token changes nothing.
func testFailLive(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	tok, _ := e.claimUnordered(1, at(0), at(time.Minute))
	msg := "boom: ünïcødé ✓ 'quoted' \"double\" `back`"
	if !e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: at(10 * time.Second), Error: msg}) {
		t.Fatalf("Fail with the live token = false")
	}
	want := stored(r)
	want.Attempts, want.LastError = 1, msg
	checkRecord(t, "row after Fail (released at once)", e.readOne(outbox.Unordered, at(10*time.Second)), want)
	if e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: at(11 * time.Second), Error: "again"}) {
		t.Fatalf("repeated Fail with the released token = true")
	}
	checkRecord(t, "row after the repeated Fail", e.readOne(outbox.Unordered, at(11*time.Second)), want)
	long := strings.Repeat("long error text ", 256)
	tok2, _ := e.claimUnordered(1, at(12*time.Second), at(time.Minute))
	if !e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok2, Now: at(13 * time.Second), Error: long}) {
		t.Fatalf("second Fail with a new claim = false")
	}
	want.Attempts, want.LastError = 2, long
	checkRecord(t, "row after the second Fail", e.readOne(outbox.Unordered, at(13*time.Second)), want)
}

// RetryAt after now delays the row until then; RetryAt at or before now leaves DeliverAt.
func testFailRetryAt(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	tok, _ := e.claimUnordered(1, at(0), at(time.Minute))
	retry := at(5*time.Minute + 3*us)
	if !e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: at(time.Second), Error: "e1", RetryAt: retry}) {
		t.Fatalf("Fail = false")
	}
	e.expiresAt("row failed with RetryAt", outbox.Unordered, idsOf(r), retry)
	if got := e.readOne(outbox.Unordered, retry); !got.DeliverAt.Equal(retry) {
		t.Fatalf("DeliverAt = %s, want RetryAt %s", fmtTime(got.DeliverAt), fmtTime(retry))
	}
	for i, ra := range []time.Time{retry.Add(-time.Second), retry.Add(time.Minute)} {
		now := retry.Add(time.Minute) // RetryAt before now, then equal to now
		tok, _ := e.claimUnordered(1, now, now.Add(time.Minute))
		if !e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: now, Error: "e", RetryAt: ra}) {
			t.Fatalf("Fail %d = false", i)
		}
		if got := e.readOne(outbox.Unordered, now); !got.DeliverAt.Equal(retry) {
			t.Fatalf("RetryAt %s at now %s moved DeliverAt to %s", fmtTime(ra), fmtTime(now), fmtTime(got.DeliverAt))
		}
	}
}

// Fail with Park moves the row to parked, with the attempt and error recorded.
func testFailPark(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r, other := NewRecord(at(0)), NewRecord(at(0))
	e.insert(r, other)
	tok, _ := e.claimUnordered(1, at(0), at(time.Minute))
	if !e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: at(time.Second), Error: "poison", Park: true}) {
		t.Fatalf("Fail with Park = false")
	}
	sameIDs(t, "eligible rows", e.readIDs(outbox.Unordered, far), idsOf(other))
	p := e.parked()
	if len(p) != 1 {
		t.Fatalf("ListParked = %d rows, want 1", len(p))
	}
	want := stored(r)
	want.Attempts, want.LastError, want.Status = 1, "poison", outbox.StatusParked
	checkRecord(t, "parked row", p[0], want)
}

// A wrong, expired or absent token fails nothing.
func testFailStale(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	if e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Now: at(0), Error: "no claim"}) {
		t.Fatalf("Fail of an unclaimed row with the zero token = true")
	}
	until := at(time.Minute)
	tok, _ := e.claimUnordered(1, at(0), until)
	if e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: outbox.NewToken(), Now: at(time.Second), Error: "wrong"}) {
		t.Fatalf("Fail with a wrong token = true")
	}
	if e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: until, Error: "expired", Park: true}) {
		t.Fatalf("Fail with a claim expiring exactly at now = true")
	}
	checkRecord(t, "row after stale Fails", e.readOne(outbox.Unordered, until), withExpiredClaim(stored(r), tok, until))
}

// Lane failures need the live lease of the lane.
func testFailLeaseFenced(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(1, 1)
	expired := e.acquireTTL(1, shortTTL)
	tok, _ := e.claimLane(1, 10, expired, at(0), at(time.Minute))
	e.waitExpired(1, expired)
	for _, c := range []struct {
		name  string
		lease outbox.Token
		now   time.Time
	}{
		{"no lease", outbox.Token{}, at(time.Second)},
		{"wrong lease", outbox.NewToken(), at(time.Second)},
		{"expired lease", expired, at(time.Second)},
	} {
		if e.fail(outbox.FailParams{ID: recs[0].ID, Token: tok, Now: c.now, Error: "x", Park: true, Lane: 1, Lease: c.lease}) {
			t.Fatalf("Fail with %s = true", c.name)
		}
		if e.fail(outbox.FailParams{ID: recs[0].ID, Now: c.now, Error: "x", Park: true, Lane: 1, Lease: c.lease}) {
			t.Fatalf("Fail of a head row with %s = true", c.name)
		}
	}
	lease := e.acquire(1)
	got := e.readOne(1, at(time.Minute))
	checkRecord(t, "row after fenced Fails (claim expired)", got, withExpiredClaim(stored(recs[0]), tok, at(time.Minute)))
	if !e.fail(outbox.FailParams{ID: recs[0].ID, Token: tok, Now: at(time.Second), Error: "x", Lane: 1, Lease: lease}) {
		t.Fatalf("Fail with the live lease = false")
	}
	if got := e.readOne(1, at(time.Second)); got.Attempts != 1 {
		t.Fatalf("attempts %d after Fail, want 1", got.Attempts)
	}
}

// Park sets aside an unclaimed row (one that cannot even be decoded), with its reason.
func testParkUnclaimed(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r, other := NewRecord(at(0)), NewRecord(at(0))
	e.insert(r, other)
	e.park(r.ID, "cannot decode", at(time.Second))
	ok, err := e.store.Park(e.ctx, outbox.NewID(), "unknown", at(time.Second))
	wantBool(t, "Park of an unknown row", ok, err, false)
	sameIDs(t, "eligible rows", e.readIDs(outbox.Unordered, far), idsOf(other))
	p := e.parked()
	if len(p) != 1 {
		t.Fatalf("ListParked = %d rows, want 1", len(p))
	}
	if p[0].ID != r.ID || p[0].Status != outbox.StatusParked || p[0].LastError != "cannot decode" {
		t.Fatalf("parked row %s status %q error %q; want %s parked with the reason", p[0].ID, p[0].Status, p[0].LastError, r.ID)
	}
}

// A row another claimer holds is not parked while the claim lives.
func testParkLiveClaim(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2 := NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2)
	until := at(time.Minute)
	tok, _ := e.claimUnordered(2, at(0), until)
	ok, err := e.store.Park(e.ctx, r1.ID, "x", at(time.Second))
	wantBool(t, "Park of a live-claimed row", ok, err, false)
	if p := e.parked(); len(p) != 0 {
		t.Fatalf("ListParked = %s, want none", idList(ids(p)))
	}
	if n := e.complete(outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: idsOf(r2), Now: at(time.Second)}); n != 1 {
		t.Fatalf("Complete of the other claimed row = %d, want 1", n)
	}
	e.park(r1.ID, "expired claim", until)
	if p := e.parked(); len(p) != 1 || p[0].ID != r1.ID {
		t.Fatalf("ListParked = %s, want %s", idList(ids(p)), r1.ID)
	}
}

// withExpiredClaim returns want holding the claim tok until until, which has expired at
// the instant of the read: a read returns the stored claim columns as they are.
func withExpiredClaim(want outbox.Record, tok outbox.Token, until time.Time) outbox.Record {
	want.ClaimToken, want.ClaimExpiresAt = tok, until
	return want
}

func (e *env) release(r outbox.ReleaseParams) int {
	e.t.Helper()
	n, err := e.store.Release(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Release: %v", err)
	}
	return n
}

// Release gives a token's live claims back at once, without counting an attempt.
func testReleaseLive(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2, other := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	r2.DeliverAt = at(-time.Second)
	e.insert(r1, r2, other)
	tok, got := e.claimUnordered(2, at(0), at(time.Minute))
	sameIDs(t, "claim", ids(got), idsOf(r1, r2))
	otherTok, _ := e.claimUnordered(1, at(0), at(time.Minute))
	if n := e.release(outbox.ReleaseParams{Token: tok, Now: at(time.Second), Lane: outbox.Unordered}); n != 2 {
		t.Fatalf("Release = %d, want 2", n)
	}
	got = e.read(outbox.Unordered, outbox.ID{}, at(time.Second), 10)
	sameIDs(t, "eligible right after Release", ids(got), idsOf(r1, r2))
	for i, w := range []outbox.Record{r1, r2} {
		checkRecord(t, "released row (no attempt counted, DeliverAt kept)", got[i], stored(w))
	}
	if n := e.release(outbox.ReleaseParams{Token: tok, Now: at(time.Second), Lane: outbox.Unordered}); n != 0 {
		t.Fatalf("repeated Release = %d, want 0", n)
	}
	// The other claimer's row stays claimed; a released row can be claimed again.
	if n := e.complete(outbox.CompleteParams{Token: otherTok, IDs: idsOf(other), Now: at(time.Second), Lane: outbox.Unordered}); n != 1 {
		t.Fatalf("Complete of the other claim = %d, want 1", n)
	}
	_, got = e.claimUnordered(10, at(time.Second), at(time.Minute))
	sameIDs(t, "claim after Release", ids(got), idsOf(r1, r2))
}

// With IDs, only those of the token's claims are released.
func testReleaseOnlyIDs(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r1, r2, r3 := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	e.insert(r1, r2, r3)
	tok, _ := e.claimUnordered(2, at(0), at(time.Minute))
	if n := e.release(outbox.ReleaseParams{Token: tok, IDs: idsOf(r2, r3), Now: at(time.Second), Lane: outbox.Unordered}); n != 1 {
		t.Fatalf("Release of r2 and unclaimed r3 = %d, want 1", n)
	}
	sameIDs(t, "eligible after a partial Release", e.readIDs(outbox.Unordered, at(time.Second)), idsOf(r2, r3))
	if n := e.complete(outbox.CompleteParams{Token: tok, IDs: idsOf(r1), Now: at(time.Second), Lane: outbox.Unordered}); n != 1 {
		t.Fatalf("Complete of the row still claimed = %d, want 1", n)
	}
}

// A wrong, expired or replaced token releases nothing.
func testReleaseStale(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	until := at(time.Minute)
	tok, _ := e.claimUnordered(1, at(0), until)
	if n := e.release(outbox.ReleaseParams{Token: outbox.NewToken(), Now: at(time.Second), Lane: outbox.Unordered}); n != 0 {
		t.Fatalf("Release with a wrong token = %d, want 0", n)
	}
	if n := e.release(outbox.ReleaseParams{Token: tok, Now: until, Lane: outbox.Unordered}); n != 0 {
		t.Fatalf("Release of a claim expiring exactly at now = %d, want 0", n)
	}
	tok2, _ := e.claimUnordered(1, until, at(2*time.Minute))
	if n := e.release(outbox.ReleaseParams{Token: tok, IDs: idsOf(r), Now: until, Lane: outbox.Unordered}); n != 0 {
		t.Fatalf("Release with the replaced token = %d, want 0", n)
	}
	e.expiresAt("the new claim after stale releases", outbox.Unordered, idsOf(r), at(2*time.Minute))
	if n := e.release(outbox.ReleaseParams{Token: tok2, Now: until, Lane: outbox.Unordered}); n != 1 {
		t.Fatalf("Release with the live token = %d, want 1", n)
	}
}

// Lane releases need the live lease of the lane; a released head is the head again.
func testReleaseLeaseFenced(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(5, 3)
	expired := e.acquireTTL(5, shortTTL)
	tok, got := e.claimLane(5, 2, expired, at(0), at(time.Minute))
	sameIDs(t, "claim", ids(got), ids(recs[:2]))
	e.waitExpired(5, expired)
	for _, c := range []struct {
		name  string
		lease outbox.Token
		now   time.Time
	}{
		{"no lease", outbox.Token{}, at(time.Second)},
		{"wrong lease", outbox.NewToken(), at(time.Second)},
		{"expired lease", expired, at(time.Second)},
	} {
		if n := e.release(outbox.ReleaseParams{Token: tok, Now: c.now, Lane: 5, Lease: c.lease}); n != 0 {
			t.Fatalf("Release with %s = %d, want 0", c.name, n)
		}
	}
	lease := e.acquire(5)
	if n := e.release(outbox.ReleaseParams{Token: tok, Now: at(time.Second), Lane: 5, Lease: lease}); n != 2 {
		t.Fatalf("Release with the live lease = %d, want 2", n)
	}
	_, got = e.claimLane(5, 10, lease, at(time.Second), at(time.Minute))
	sameIDs(t, "lane claim after Release", ids(got), ids(recs))
}
