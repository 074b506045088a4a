package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// These PostgreSQL tests cover what only this dialect has (its SQL shapes, the session
// TimeZone, corrupt rows written through bytea); the store contract itself is
// outboxtest's.

var base = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

func rec(created time.Time, key string, lanesN int) outbox.Record {
	id := outbox.NewID()
	r := outbox.Record{
		ID:          id,
		MessageUUID: "uuid-" + id.String(),
		Lane:        outbox.Unordered,
		Destination: "topic",
		Headers:     headercodec.Encode(nil, []headercodec.Header{{Name: "a", Value: []byte{0, 1}}, {Name: "a"}}),
		Body:        []byte("body-" + id.String()),
		CreatedAt:   created,
	}
	if key != "" {
		r.OrderingKey = key
		r.Lane = lanes.Of(key, lanesN)
	}
	return r
}

func insert(t testing.TB, db *sql.DB, s outbox.Store, recs ...outbox.Record) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(context.Background(), tx, recs); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestSmokeUnordered(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	s := newStore(t, db, outbox.Options{Lanes: 8})
	ctx := context.Background()
	r1, r2 := rec(base, "", 8), rec(base.Add(time.Second), "", 8)
	r2.DeliverAt = base.Add(time.Minute)
	r2.Body = nil
	r2.TenantID, r2.MessageType, r2.Transport = "tenant", "type", "amqp"
	insert(t, db, s, r1, r2)

	got, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: base}, make([]outbox.Record, 10))
	if err != nil || len(got) != 1 || got[0].ID != r1.ID {
		t.Fatalf("Read = %v, %v", got, err)
	}
	if !bytes.Equal(got[0].Headers, r1.Headers) || string(got[0].Body) != string(r1.Body) || got[0].Corrupt != nil {
		t.Fatalf("round trip: %+v", got[0])
	}
	got, err = s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: base.Add(time.Minute)}, make([]outbox.Record, 10))
	if err != nil || len(got) != 2 || got[1].ID != r2.ID || got[1].Body == nil || len(got[1].Body) != 0 ||
		got[1].TenantID != "tenant" || got[1].MessageType != "type" || got[1].Transport != "amqp" ||
		!got[1].DeliverAt.Equal(r2.DeliverAt) || got[1].DeliverAt.Location() != time.UTC {
		t.Fatalf("Read later = %+v, %v", got, err)
	}

	tok := outbox.NewToken()
	now := base.Add(time.Minute)
	claimed, err := s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: now, Until: now.Add(time.Minute), Token: tok}, nil)
	if err != nil || len(claimed) != 2 || claimed[0].ID != r1.ID || claimed[0].ClaimToken != tok {
		t.Fatalf("Claim = %+v, %v", claimed, err)
	}
	again, err := s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: now, Until: now.Add(time.Minute), Token: outbox.NewToken()}, nil)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Claim = %d rows, %v", len(again), err)
	}
	if n, err := s.Release(ctx, outbox.ReleaseParams{Token: tok, IDs: []outbox.ID{r1.ID}, Now: now, Lane: outbox.Unordered}); err != nil || n != 1 {
		t.Fatalf("Release = %d, %v", n, err)
	}
	claimed, err = s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: now, Until: now.Add(time.Minute), Token: tok}, claimed)
	if err != nil || len(claimed) != 1 || claimed[0].ID != r1.ID || claimed[0].Attempts != 0 {
		t.Fatalf("Claim after Release = %+v, %v", claimed, err)
	}
	n, err := s.Renew(ctx, outbox.RenewParams{Token: tok, Now: now, Until: now.Add(30 * time.Second), Lane: outbox.Unordered})
	if err != nil || n != 2 {
		t.Fatalf("Renew (shorter) = %d, %v", n, err)
	}
	ok, err := s.Fail(ctx, outbox.FailParams{ID: r2.ID, Token: tok, Now: now, Error: "bad\x00\xff", RetryAt: now.Add(time.Hour), Lane: outbox.Unordered})
	if err != nil || !ok {
		t.Fatalf("Fail = %v, %v", ok, err)
	}
	ok, err = s.Fail(ctx, outbox.FailParams{ID: r2.ID, Token: tok, Now: now, Error: "again", Lane: outbox.Unordered})
	if err != nil || ok {
		t.Fatalf("repeated Fail = %v, %v", ok, err)
	}
	n, err = s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{r1.ID, r2.ID}, Now: now, Lane: outbox.Unordered})
	if err != nil || n != 1 {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	c, err := s.Count(ctx, now.Add(time.Hour))
	if err != nil || c != 1 {
		t.Fatalf("Count = %d, %v", c, err)
	}
	ok, err = s.Park(ctx, r2.ID, "poison", now)
	if err != nil || !ok {
		t.Fatalf("Park = %v, %v", ok, err)
	}
	parked, err := s.ListParked(ctx, outbox.ParkedQuery{Limit: 10})
	if err != nil || len(parked) != 1 || parked[0].Attempts != 1 || parked[0].LastError != "poison" || parked[0].Status != outbox.StatusParked {
		t.Fatalf("ListParked = %+v, %v", parked, err)
	}
	st, err := s.Stats(ctx, now)
	if err != nil || st.Parked != 1 || len(st.Lanes) != 0 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	n, err = s.Requeue(ctx, outbox.ParkedFilter{All: true})
	if err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	st, err = s.Stats(ctx, time.Now().Add(time.Hour)) // due at the server's now
	if err != nil || st.Parked != 0 || len(st.Lanes) != 1 || st.Lanes[0].Lane != outbox.Unordered || st.Lanes[0].Eligible != 1 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	if ml, err := s.MaxLane(ctx); err != nil || ml != outbox.Unordered {
		t.Fatalf("MaxLane = %d, %v", ml, err)
	}
}

func TestSmokeOrdered(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	s := newStore(t, db, outbox.Options{Lanes: 8})
	ctx := context.Background()
	lane := lanes.Of("k1", 8)
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := "k" + string(rune('a'+i))
		if lanes.Of(k, 8) == lane {
			keys = append(keys, k)
		}
	}
	a1, b1, a2, b2 := rec(base, keys[0], 8), rec(base, keys[1], 8), rec(base, keys[0], 8), rec(base, keys[1], 8)
	a2.DeliverAt = base.Add(time.Hour) // not due: holds the lane behind it
	insert(t, db, s, a1, b1, a2, b2)

	lease := outbox.NewToken()
	ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: "me", Token: lease, TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	ok, err = s.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: "other", Token: outbox.NewToken(), TTL: time.Minute})
	if err != nil || ok {
		t.Fatalf("AcquireLease held = %v, %v", ok, err)
	}
	// Without the lease: nothing.
	got, err := s.Claim(ctx, outbox.ClaimParams{Lane: lane, Limit: 10, Now: base, Until: base.Add(time.Minute), Token: outbox.NewToken(), Lease: outbox.NewToken()}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Claim without lease = %d, %v", len(got), err)
	}
	tok := outbox.NewToken()
	got, err = s.Claim(ctx, outbox.ClaimParams{Lane: lane, Limit: 10, Now: base, Until: base.Add(time.Minute), Token: tok, Lease: lease}, nil)
	if err != nil || len(got) != 2 || got[0].ID != a1.ID || got[1].ID != b1.ID {
		t.Fatalf("Claim head = %+v, %v", got, err)
	}
	// The head is claimed: the lane is held.
	got, err = s.Claim(ctx, outbox.ClaimParams{Lane: lane, Limit: 10, Now: base, Until: base.Add(time.Minute), Token: outbox.NewToken(), Lease: lease}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Claim held lane = %d, %v", len(got), err)
	}
	// a1 fails and parks; with HoldParkedKeys, a2 (same key) is held, b2 flows — once
	// b1 is done and a2 is due.
	ok, err = s.Fail(ctx, outbox.FailParams{ID: a1.ID, Token: tok, Now: base, Error: "x", Park: true, Lane: lane, Lease: lease})
	if err != nil || !ok {
		t.Fatalf("Fail park = %v, %v", ok, err)
	}
	n, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{b1.ID}, Now: base, Lane: lane, Lease: outbox.NewToken()})
	if err != nil || n != 0 {
		t.Fatalf("Complete with a foreign lease = %d, %v", n, err)
	}
	n, err = s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{b1.ID}, Now: base, Lane: lane, Lease: lease})
	if err != nil || n != 1 {
		t.Fatalf("Complete = %d, %v", n, err)
	}
	got, err = s.Claim(ctx, outbox.ClaimParams{Lane: lane, Limit: 10, Now: base, Until: base.Add(time.Minute), Token: outbox.NewToken(), Lease: lease}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Claim behind a not-due head = %d, %v", len(got), err)
	}
	got, err = s.Claim(ctx, outbox.ClaimParams{Lane: lane, Limit: 10, Now: base, Until: base.Add(time.Minute), Token: outbox.NewToken(), Lease: lease, HoldParkedKeys: true}, nil)
	if err != nil || len(got) != 1 || got[0].ID != b2.ID {
		t.Fatalf("Claim holding parked keys = %+v, %v", got, err)
	}
	if ml, err := s.MaxLane(ctx); err != nil || ml != lane {
		t.Fatalf("MaxLane = %d, %v", ml, err)
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 1 || ls[0].Token != lease || ls[0].Owner != "me" || ls[0].ExpiresAt.Location() != time.UTC {
		t.Fatalf("Leases = %+v, %v", ls, err)
	}
	ok, err = s.RenewLease(ctx, outbox.LeaseParams{Lane: lane, Token: lease, TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("RenewLease = %v, %v", ok, err)
	}
	ok, err = s.ReleaseLease(ctx, lane, lease)
	if err != nil || !ok {
		t.Fatalf("ReleaseLease = %v, %v", ok, err)
	}
	if err := s.Heartbeat(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "B", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "a", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a's heartbeat expires on the server's clock
	m, err := s.Members(ctx)
	if err != nil || len(m) != 2 || m[0] != "B" || m[1] != "b" {
		t.Fatalf("Members = %v, %v", m, err)
	}
}

// TestSessionTimeZone: instants are bound and read as absolute times, so a session
// TimeZone far from UTC changes nothing, to the microsecond.
func TestSessionTimeZone(t *testing.T) {
	t.Parallel()
	for _, tz := range []string{"Asia/Kolkata", "America/St_Johns", "+05:30"} {
		t.Run(tz, func(t *testing.T) {
			db := openDB(t, tz)
			var got string
			if err := db.QueryRow("SHOW TimeZone").Scan(&got); err != nil || got == "UTC" {
				t.Fatalf("session TimeZone = %q, %v", got, err)
			}
			s := newStore(t, db, outbox.Options{Lanes: 8})
			r := rec(base, "", 8)
			r.DeliverAt = base.Add(time.Microsecond)
			insert(t, db, s, r)
			read := func(now time.Time) []outbox.Record {
				got, err := s.Read(context.Background(), outbox.ReadQuery{Lane: outbox.Unordered, Now: now}, make([]outbox.Record, 1))
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if len(read(base)) != 0 {
				t.Fatal("row due one microsecond later is eligible")
			}
			got1 := read(base.Add(time.Microsecond))
			if len(got1) != 1 || !got1[0].CreatedAt.Equal(base) || got1[0].CreatedAt.Location() != time.UTC || !got1[0].DeliverAt.Equal(r.DeliverAt) {
				t.Fatalf("Read = %+v", got1)
			}
		})
	}
}

// TestCorruptHeaders: a row whose headers were damaged by raw SQL is returned with
// Corrupt naming it; its neighbours are intact.
func TestCorruptHeaders(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	s := newStore(t, db, outbox.Options{Lanes: 8})
	r1, r2, r3 := rec(base, "", 8), rec(base, "", 8), rec(base, "", 8)
	insert(t, db, s, r1, r2, r3)
	tbl := `"` + s.Options().OutboxTable() + `"`
	if _, err := db.Exec(`UPDATE `+tbl+` SET headers = '\x0200000000000000'::bytea WHERE id = $1`, r2.ID[:]); err != nil {
		t.Fatal(err)
	}
	check := func(got []outbox.Record, err error) {
		t.Helper()
		if err != nil || len(got) != 3 || got[0].Corrupt != nil || got[2].Corrupt != nil {
			t.Fatalf("got %+v, %v", got, err)
		}
		var ce *outbox.CorruptRowError
		if !errors.As(got[1].Corrupt, &ce) || ce.ID != r2.ID || ce.Column != "headers" || !errors.Is(ce, headercodec.ErrCorrupt) {
			t.Fatalf("row 2 Corrupt = %v", got[1].Corrupt)
		}
	}
	check(s.Read(context.Background(), outbox.ReadQuery{Lane: outbox.Unordered, Now: base}, make([]outbox.Record, 5)))
	check(s.Claim(context.Background(), outbox.ClaimParams{Lane: outbox.Unordered, Limit: 5, Now: base, Until: base.Add(time.Second), Token: outbox.NewToken()}, nil))
}

func TestInsertRejectsInvalidRecords(t *testing.T) {
	t.Parallel()
	db := openDB(t, "")
	s := newStore(t, db, outbox.Options{Lanes: 8})
	good := rec(base, "", 8)
	for name, mutate := range map[string]func(*outbox.Record){
		"zero id":      func(r *outbox.Record) { r.ID = outbox.ID{} },
		"lane":         func(r *outbox.Record) { r.Lane = 8 },
		"headers":      func(r *outbox.Record) { r.Headers = nil },
		"NUL":          func(r *outbox.Record) { r.Destination = "a\x00b" },
		"invalid UTF8": func(r *outbox.Record) { r.TenantID = "\xff" },
	} {
		bad := rec(base, "", 8)
		mutate(&bad)
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		err = s.Insert(context.Background(), tx, []outbox.Record{good, bad})
		if !errors.Is(err, outbox.ErrInvalidRecord) {
			t.Errorf("%s: Insert = %v, want ErrInvalidRecord", name, err)
		}
		// Nothing was sent: the transaction is still usable.
		if err := s.Insert(context.Background(), tx, []outbox.Record{rec(base, "", 8)}); err != nil {
			t.Errorf("%s: insert after a rejected batch: %v", name, err)
		}
		tx.Rollback()
	}
}
