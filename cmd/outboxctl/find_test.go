package main

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

func TestFindUsage(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "")
	ctl(t, "find", "-dsn", "x").fails(t, 2, "give -uuid U, -key K, or -topic T")
	ctl(t, "find", "-dsn", "x", "-topic", "orders").fails(t, 2, "give -uuid U, -key K, or -topic T")
	ctl(t, "find", "-dsn", "x", "-uuid", "u", "-key", "k").fails(t, 2, "not both")
	ctl(t, "find", "-dsn", "x", "-uuid", "u", "-since", "yesterday").fails(t, 2, `-since "yesterday"`)
	ctl(t, "find", "-dsn", "x", "-topic", "t", "-since", "1h", "-until", "2h").fails(t, 2, "before it starts")
	ctl(t, "find", "-dsn", "x", "-key", "").fails(t, 2, "-key: the ordering key is empty")
	ctl(t, "find", "-dsn", "x", "-uuid", "u", "-limit", "0").fails(t, 2, "-limit")
	for _, d := range []string{"mysql", "postgres", "sqlserver"} {
		o := ctl(t, "schema", "print", "-find-index", "-dialect", d, "-prefix", "shop_").ok(t)
		if !strings.Contains(o.stdout, "CREATE INDEX") || !strings.Contains(o.stdout, "shop_outbox") || !strings.Contains(o.stdout, "costs every publish") {
			t.Errorf("%s: schema print -find-index:\n%s", d, o.stdout)
		}
	}
}

// find against a live server, every case: pending in a lane under a live lease,
// scheduled, claimed, parked with its error and attempts, gone from the outbox with the
// inbox entries of two consumers, by ordering key, by topic and window, without and
// then with the message_uuid index.
func TestFindLive(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			testFindLive(t, d.name, d.service, d.driver)
		})
	}
}

func testFindLive(t *testing.T, dialect, service, driver string) {
	dsn := testenv.DSN(t, service)
	prefix := testenv.Prefix(t)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		testenv.Unavailable(t, service, err)
	}
	o := &opts{dialect: dialect, prefix: prefix, lanes: outbox.LanesDefault}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tbl := range o.options().TableNames() {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+qualified(o, tbl)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	with := func(args ...string) []string {
		return append(args, "-dialect", dialect, "-dsn", dsn, "-prefix", prefix)
	}
	ctl(t, with("schema", "apply")...).ok(t)
	store, err := newStore(db, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seedFind(t, ctx, store)

	// Without the index a UUID needs a window, and the error says how to get either.
	ctl(t, with("find", "-uuid", "m-pending")...).fails(t, 1, "-since", "outboxctl schema print -find-index")

	lease := outbox.NewToken()
	lane := lanes.Of("order-42", outbox.LanesDefault)
	if ok, err := store.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: "fwd-a", Token: lease, TTL: time.Hour}); err != nil || !ok {
		t.Fatalf("AcquireLease: %v %v", ok, err)
	}
	one := func(uuid string, args ...string) foundJSON {
		t.Helper()
		f := decode[findJSON](t, ctl(t, with(append([]string{"find", "-uuid", uuid, "--json"}, args...)...)...).ok(t))
		if len(f.Rows) != 1 || f.NotInOutbox != "" || !f.InboxTable {
			t.Fatalf("find -uuid %s: %+v", uuid, f)
		}
		return f.Rows[0]
	}
	r := one("m-pending", "-since", "1h")
	if r.State != "pending" || r.OrderingKey != "order-42" || r.Lane != lane || r.LaneLease == nil || r.LaneLease.Owner != "fwd-a" ||
		!r.LaneLease.Live || r.LaneLease.Token != lease.String() || r.Metadata["app"] != "shop" || r.Destination != "orders" {
		t.Errorf("pending row: %+v", r)
	}
	if r := one("m-scheduled", "-since", "1h"); r.State != "scheduled" || r.DeliverAt.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("scheduled row: %+v", r)
	}
	if r := one("m-claimed", "-since", "1h"); r.State != "claimed" || r.Claim == nil || !r.Claim.Live {
		t.Errorf("claimed row: %+v", r)
	}
	if r := one("m-parked", "-since", "1h"); r.State != "parked" || r.Attempts != 1 || r.LastError != "broker said no" {
		t.Errorf("parked row: %+v", r)
	}
	gone := decode[findJSON](t, ctl(t, with("find", "-uuid", "m-consumed", "-since", "1h", "--json")...).ok(t))
	if len(gone.Rows) != 0 || gone.NotInOutbox != outbox.NotInOutboxExplanation || len(gone.Inbox) != 2 ||
		gone.Inbox[0].Consumer != "billing" || gone.Inbox[0].Duplicates != 2 || gone.Inbox[1].Consumer != "shipping" || gone.Inbox[1].Duplicates != 0 {
		t.Errorf("a consumed message: %+v", gone)
	}
	text := ctl(t, with("find", "-uuid", "m-consumed", "-since", "1h")...).ok(t).stdout
	for _, w := range []string{"not in the outbox", "cannot be told apart", "billing: first processed", "2 duplicates skipped", "shipping"} {
		if !strings.Contains(text, w) {
			t.Errorf("find of a consumed message lacks %q:\n%s", w, text)
		}
	}
	byKey := decode[findJSON](t, ctl(t, with("find", "-key", "order-42", "--json")...).ok(t))
	if len(byKey.Rows) != 2 || byKey.Rows[0].MessageUUID != "m-pending" || byKey.Rows[1].MessageUUID != "m-second" || byKey.More {
		t.Errorf("find -key: %+v", byKey)
	}
	if k := decode[findJSON](t, ctl(t, with("find", "-key", "order-42", "-limit", "1", "--json")...).ok(t)); len(k.Rows) != 1 || !k.More {
		t.Errorf("find -key -limit 1: %+v", k)
	}
	text = ctl(t, with("find", "-key", "order-42")...).ok(t).stdout
	for _, w := range []string{"ordering key \"order-42\"", "PENDING", "lane " + itoa(lane) + " lease: fwd-a", "m-second"} {
		if !strings.Contains(text, w) {
			t.Errorf("find -key lacks %q:\n%s", w, text)
		}
	}
	byTopic := decode[findJSON](t, ctl(t, with("find", "-topic", "payments", "-since", "1h", "-until", "0s", "--json")...).ok(t))
	if len(byTopic.Rows) != 1 || byTopic.Rows[0].MessageUUID != "m-payment" {
		t.Errorf("find -topic: %+v", byTopic)
	}
	if f := decode[findJSON](t, ctl(t, with("find", "-topic", "payments", "-until", "1h", "--json")...).ok(t)); len(f.Rows) != 0 {
		t.Errorf("find -topic before the rows: %+v", f)
	}
	text = ctl(t, with("find", "-uuid", "m-parked", "-since", "1h")...).ok(t).stdout
	if !strings.Contains(text, "PARKED after 1 attempt: broker said no") || !strings.Contains(text, "outboxctl parked requeue -id") {
		t.Errorf("find of a parked row:\n%s", text)
	}
	// An unordered row a forwarder's open batch holds locked is in flight too.
	err = ob(t, store).WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error { return tx.Publish("orders", msg("m-locked", "")) })
	if err != nil {
		t.Fatal(err)
	}
	if r := one("m-locked", "-since", "1h"); r.State != "pending" {
		t.Errorf("an unlocked row: %+v", r)
	}
	batch, err := store.(outbox.BatchLocker).LockBatch(ctx, outbox.LockParams{Limit: 10, Now: time.Now()})
	if err != nil || len(batch.Records()) != 1 {
		t.Fatalf("LockBatch: %v", err)
	}
	if r := one("m-locked", "-since", "1h"); r.State != "locked" {
		t.Errorf("a locked row: %+v", r)
	}
	text = ctl(t, with("find", "-uuid", "m-locked", "-since", "1h")...).ok(t).stdout
	if !strings.Contains(text, "IN FLIGHT: locked by a forwarder's open batch") {
		t.Errorf("find of a locked row:\n%s", text)
	}
	if err := batch.Rollback(); err != nil {
		t.Fatal(err)
	}
	text = ctl(t, with("find", "-uuid", "m-claimed", "-since", "1h")...).ok(t).stdout
	if !strings.Contains(text, "IN FLIGHT: claimed by token") {
		t.Errorf("find of a claimed row:\n%s", text)
	}

	// With the index, a UUID alone.
	script := ctl(t, "schema", "print", "-find-index", "-dialect", dialect, "-prefix", prefix).ok(t).stdout
	if _, err := db.ExecContext(ctx, script); err != nil {
		t.Fatalf("the find index: %v", err)
	}
	if r := one("m-scheduled"); r.State != "scheduled" {
		t.Errorf("scheduled row by the index: %+v", r)
	}
	if f := decode[findJSON](t, ctl(t, with("find", "-uuid", "never-published", "--json")...).ok(t)); len(f.Rows) != 0 || f.NotInOutbox == "" || len(f.Inbox) != 0 {
		t.Errorf("an unknown UUID: %+v", f)
	}
}

// seedFind writes the rows and inbox entries TestFindLive looks for: m-pending and
// m-second of key order-42, m-scheduled (in an hour), m-claimed (claimed), m-parked
// (failed once and parked), m-payment (topic payments, claimed too), and inbox entries
// of m-consumed (billing thrice, shipping once).
func seedFind(t *testing.T, ctx context.Context, store outbox.Store) {
	t.Helper()
	err := ob(t, store).WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
		sched := msg("m-scheduled", "")
		publisher.SetDeliverAt(sched, time.Now().Add(time.Hour))
		if err := tx.Publish("orders", msg("m-pending", "order-42"), msg("m-second", "order-42"), sched, msg("m-claimed", ""), msg("m-parked", "")); err != nil {
			return err
		}
		return tx.Publish("payments", msg("m-payment", ""))
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token := outbox.NewToken()
	claimed, err := store.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 10, Now: now, Until: now.Add(time.Hour), Token: token}, nil)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d rows, %v", len(claimed), err)
	}
	for _, r := range claimed {
		if r.MessageUUID != "m-parked" {
			continue
		}
		if ok, err := store.Fail(ctx, outbox.FailParams{ID: r.ID, Token: token, Now: now, Error: "broker said no", Park: true, Lane: outbox.Unordered}); err != nil || !ok {
			t.Fatalf("fail: %v %v", ok, err)
		}
	}
	in := store.(outbox.Inbox)
	for _, c := range []string{"billing", "shipping", "billing", "billing"} {
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.RecordInbox(ctx, tx, c, "m-consumed", now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// ob is a publisher over store.
func ob(t *testing.T, store outbox.Store) *publisher.Outbox {
	t.Helper()
	o, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// msg is a message with metadata app=shop and, when key is set, an ordering key.
func msg(uuid, key string) *message.Message {
	m := message.NewMessage(uuid, []byte("SECRET-PAYLOAD"))
	m.Metadata.Set("app", "shop")
	if key != "" {
		m.Metadata.Set(publisher.MetadataOrderingKey, key)
	}
	return m
}

func itoa(n int) string { return strconv.Itoa(n) }
