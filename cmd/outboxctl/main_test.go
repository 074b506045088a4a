package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

type out struct {
	code           int
	stdout, stderr string
}

func ctl(t *testing.T, args ...string) out {
	t.Helper()
	var so, se bytes.Buffer
	code := run(context.Background(), args, &so, &se)
	return out{code, so.String(), se.String()}
}

func (o out) ok(t *testing.T) out {
	t.Helper()
	if o.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", o.code, o.stdout, o.stderr)
	}
	return o
}

func (o out) fails(t *testing.T, code int, want ...string) out {
	t.Helper()
	if o.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", o.code, code, o.stdout, o.stderr)
	}
	for _, w := range want {
		if !strings.Contains(o.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, o.stderr)
		}
	}
	return o
}

func decode[T any](t *testing.T, o out) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(o.stdout), &v); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, o.stdout)
	}
	return v
}

// dialects are the live servers the CLI is tested against.
var dialects = []struct{ name, service, driver string }{
	{"mysql", testenv.MySQL, "mysql"},
	{"postgres", testenv.Postgres, "pgx"},
}

// schema migrate prints the dialect's MigrateScript (the seq column; no DSN needed);
// SQL Server has none and says what to do instead.
func TestSchemaMigrate(t *testing.T) {
	for d, want := range map[string]string{"mysql": "ADD PRIMARY KEY (lane, seq, id)", "postgres": "ADD GENERATED ALWAYS AS IDENTITY"} {
		if o := ctl(t, "schema", "migrate", "-dialect", d, "-prefix", "shop_").ok(t); !strings.Contains(o.stdout, want) || !strings.Contains(o.stdout, "shop_outbox") {
			t.Errorf("%s: schema migrate lacks %q:\n%s", d, want, o.stdout)
		}
	}
	ctl(t, "schema", "migrate", "-dialect", "sqlserver").fails(t, 1, "drop the rows table")
}

func TestSchemaPrint(t *testing.T) {
	for _, d := range []string{"mysql", "postgres", "sqlserver"} {
		o := ctl(t, "schema", "print", "-dialect", d, "-prefix", "shop_").ok(t)
		for _, w := range []string{"CREATE TABLE", "shop_outbox", "shop_outbox_lanes", "shop_outbox_nodes"} {
			if !strings.Contains(o.stdout, w) {
				t.Errorf("%s: schema print lacks %q", d, w)
			}
		}
	}
	// No DSN needed; the default dialect is mysql.
	if o := ctl(t, "schema", "print").ok(t); !strings.Contains(o.stdout, "`outbox`") {
		t.Errorf("default schema print is not MySQL's:\n%s", o.stdout)
	}
	// Invalid options name the field.
	ctl(t, "schema", "print", "-prefix", "a\x00b").fails(t, 1, "TablePrefix")
	ctl(t, "schema", "print", "-lanes", "-1").fails(t, 1, "Lanes")
	ctl(t, "schema", "print", "-lanes", "5000").fails(t, 1, "Lanes")
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "")
	ctl(t).fails(t, 2, "no command")
	ctl(t, "bogus").fails(t, 2, `unknown command "bogus"`)
	ctl(t, "parked").fails(t, 2, "list, requeue or purge")
	ctl(t, "schema", "drop").fails(t, 2, `unknown command "schema drop"`)
	ctl(t, "stats").fails(t, 2, "-dsn (or OUTBOX_DSN) is required")
	ctl(t, "stats", "-dsn", "x", "-dialect", "oracle").fails(t, 2, `-dialect "oracle"`)
	ctl(t, "stats", "-dsn", "x", "extra").fails(t, 2, `unexpected argument "extra"`)
	ctl(t, "parked", "requeue", "-dsn", "x").fails(t, 2, "exactly one of -id, -key or -all")
	ctl(t, "parked", "requeue", "-dsn", "x", "-all", "-key", "k").fails(t, 2, "exactly one of -id, -key or -all")
	ctl(t, "parked", "requeue", "-dsn", "x", "-id", "not-an-id").fails(t, 2, "-id")
	ctl(t, "parked", "purge", "-dsn", "x", "-all").fails(t, 2, "--yes")
	ctl(t, "parked", "list", "-dsn", "x", "-limit", "0").fails(t, 2, "-limit")
	if o := ctl(t, "help").ok(t); !strings.Contains(o.stdout, "outboxctl parked purge") {
		t.Errorf("help lacks the commands:\n%s", o.stdout)
	}
}

func TestGuessDialect(t *testing.T) {
	for dsn, want := range map[string]string{
		"root@tcp(127.0.0.1:3306)/test":                  "mysql",
		"postgres://u:p@h/db":                            "postgres",
		"postgresql://h/db":                              "postgres",
		"host=h user=u dbname=db":                        "postgres",
		"sqlserver://sa:p@h:1433?database=test":          "sqlserver",
		"server=h;user id=sa;password=p;database=test":   "sqlserver",
		"app:p@unix(/run/mysqld/mysqld.sock)/db?loc=UTC": "mysql",
	} {
		if got := guessDialect(dsn); got != want {
			t.Errorf("guessDialect(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// Unreachable servers: the host is named, the password never shown.
func TestUnreachable(t *testing.T) {
	for _, dsn := range []string{
		"app:Hunter2Secret@tcp(127.0.0.1:1)/test",
		"postgres://app:Hunter2Secret@127.0.0.1:1/test?sslmode=disable",
		"host=127.0.0.1 port=1 user=app password=Hunter2Secret dbname=test sslmode=disable",
		"sqlserver://sa:Hunter2Secret@127.0.0.1:1?database=test&dial+timeout=2",
	} {
		o := ctl(t, "stats", "-dsn", dsn, "-timeout", "15s").fails(t, 1, "cannot connect to", "127.0.0.1:1", "xxxxx")
		if strings.Contains(o.stdout+o.stderr, "Hunter2Secret") {
			t.Errorf("%s: the password appears:\n%s", dsn, o.stderr)
		}
	}
}

// Every subcommand against a live server, per dialect.
func TestLive(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			dsn := testenv.DSN(t, d.service)
			prefix := testenv.Prefix(t)
			db, err := sql.Open(d.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := db.Ping(); err != nil {
				testenv.Unavailable(t, d.service, err)
			}
			o := &opts{dialect: d.name, prefix: prefix, lanes: outbox.LanesDefault}
			testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
				var errs []error
				for _, tbl := range o.options().TableNames() {
					if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+qualified(o, tbl)); err != nil {
						errs = append(errs, err)
					}
				}
				return errors.Join(errs...)
			})
			base := []string{"-dialect", d.name, "-dsn", dsn, "-prefix", prefix}
			with := func(args ...string) []string { return append(args, base...) }

			// Missing tables: which table, how to create it.
			ctl(t, with("stats")...).fails(t, 1, prefix+"outbox", "do not exist", "outboxctl schema apply -dialect "+d.name+` -prefix "`+prefix+`"`)

			// schema apply, twice (idempotent).
			if a := ctl(t, with("schema", "apply")...).ok(t); !strings.Contains(a.stdout, "schema applied") {
				t.Errorf("schema apply says:\n%s", a.stdout)
			}
			ctl(t, with("schema", "apply")...).ok(t)

			// A wrong prefix points at the right one.
			typo := strings.TrimSuffix(prefix, "_") + "x_"
			ctl(t, "stats", "-dialect", d.name, "-dsn", dsn, "-prefix", typo).fails(t, 1, typo+"outbox", `-prefix "`+prefix+`"`)

			// Empty table.
			st := decode[statsJSON](t, ctl(t, with("stats", "--json")...).ok(t))
			if st.Eligible != 0 || st.Parked != 0 || len(st.PerLane) != 0 || st.MaxLane != nil {
				t.Fatalf("empty table stats: %+v", st)
			}
			if st.Inbox == nil || st.Inbox.Entries != 0 || len(st.Inbox.Consumers) != 0 {
				t.Fatalf("empty inbox stats: %+v", st.Inbox)
			}

			// Three rows of key "k1", two unordered, one of key "k2".
			store, err := newStore(db, o)
			if err != nil {
				t.Fatal(err)
			}
			ob, err := publisher.New(store, publisher.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
				for _, key := range []string{"k1", "k1", "k1", "", "", "k2"} {
					m := message.NewMessage(watermill.NewUUID(), []byte("SECRET-PAYLOAD"))
					m.Metadata.Set(publisher.MetadataOrderingKey, key)
					if err := tx.Publish("orders", m); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			k1, k2 := lanes.Of("k1", outbox.LanesDefault), lanes.Of("k2", outbox.LanesDefault)

			st = decode[statsJSON](t, ctl(t, with("stats", "--json")...).ok(t))
			want := map[int]int64{outbox.Unordered: 2, k1: 3, k2: 1}
			if k1 == k2 {
				want[k1] = 4
			}
			if st.Eligible != 6 || st.Parked != 0 || len(st.PerLane) != len(want) {
				t.Fatalf("stats: %+v", st)
			}
			for _, l := range st.PerLane {
				if want[l.Lane] != l.Eligible || l.Ordered != (l.Lane != outbox.Unordered) || l.OldestEligible == nil || l.OldestAgeSec < 0 {
					t.Errorf("lane %+v, want eligible %d", l, want[l.Lane])
				}
			}
			if st.MaxLane == nil || *st.MaxLane != max(k1, k2) || st.LaneMismatch {
				t.Errorf("max lane %v, mismatch %v", st.MaxLane, st.LaneMismatch)
			}
			// Three inbox entries of two consumers; billing's m1 delivered twice more.
			if in, ok := store.(outbox.Inbox); ok {
				tx, err := db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range [][2]string{{"billing", "m1"}, {"billing", "m2"}, {"shipping", "m1"}, {"billing", "m1"}, {"billing", "m1"}} {
					if _, err := in.RecordInbox(ctx, tx, e[0], e[1], time.Now().Add(-time.Hour)); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				st = decode[statsJSON](t, ctl(t, with("stats", "--json")...).ok(t))
				if st.Inbox == nil || st.Inbox.Entries != 3 || len(st.Inbox.Consumers) != 2 || st.Inbox.Consumers[0].Consumer != "billing" ||
					st.Inbox.Consumers[0].Entries != 2 || st.Inbox.OldestAgeSec < 3500 ||
					st.Inbox.Duplicates != 2 || st.Inbox.Consumers[0].Duplicates != 2 || st.Inbox.Consumers[1].Duplicates != 0 {
					t.Fatalf("inbox stats: %+v", st.Inbox)
				}
			}
			table := ctl(t, with("stats")...).ok(t).stdout
			for _, w := range []string{"backlog   6 eligible rows", "LANE", "unordered", "parked    0 rows", "3 entries, 2 duplicates skipped", "CONSUMER", "DUPLICATES", "billing"} {
				if !strings.Contains(table, w) {
					t.Errorf("stats table lacks %q:\n%s", w, table)
				}
			}
			// A lane count smaller than the table's lanes is flagged.
			small := ctl(t, "stats", "-dialect", d.name, "-dsn", dsn, "-prefix", prefix, "-lanes", "1").ok(t).stdout
			if !strings.Contains(small, "WARNING") {
				t.Errorf("no lane-count warning with -lanes 1:\n%s", small)
			}
			// An inbox table without the duplicates column (created by an older version):
			// stats still shows the outbox and names the ALTER.
			if st.Inbox != nil {
				if _, err := db.ExecContext(ctx, "ALTER TABLE "+st.Inbox.Table+" DROP COLUMN duplicates"); err != nil {
					t.Fatal(err)
				}
				old := ctl(t, with("stats")...).ok(t).stdout
				if !strings.Contains(old, "backlog   6 eligible rows") || !strings.Contains(old, "WARNING") || !strings.Contains(old, "ADD COLUMN duplicates") {
					t.Errorf("stats over an old inbox table:\n%s", old)
				}
				oj := decode[statsJSON](t, ctl(t, with("stats", "--json")...).ok(t))
				if oj.Eligible != 6 || oj.Inbox == nil || !strings.Contains(oj.Inbox.Outdated, "ADD COLUMN duplicates") {
					t.Errorf("stats --json over an old inbox table: %+v, inbox %+v", oj, oj.Inbox)
				}
			}

			// Park two rows of k1 (the store's Park, as the forwarder does for poison rows).
			recs, err := store.Read(ctx, outbox.ReadQuery{Lane: k1, Now: time.Now().Add(time.Minute)}, make([]outbox.Record, 10))
			if err != nil {
				t.Fatal(err)
			}
			var k1IDs []outbox.ID
			for _, r := range recs {
				if r.OrderingKey == "k1" {
					k1IDs = append(k1IDs, r.ID)
				}
			}
			if len(k1IDs) != 3 {
				t.Fatalf("read %d rows of k1", len(k1IDs))
			}
			for _, id := range k1IDs[:2] {
				if ok, err := store.Park(ctx, id, "broker said no\nsecond line", time.Now()); err != nil || !ok {
					t.Fatalf("park: %v %v", ok, err)
				}
			}

			list := ctl(t, with("parked", "list", "--json")...).ok(t)
			parked := decode[[]parkedJSON](t, list)
			if len(parked) != 2 || parked[0].ID != k1IDs[0].String() || parked[1].ID != k1IDs[1].String() ||
				parked[0].OrderingKey != "k1" || parked[0].Destination != "orders" || parked[0].BodyBytes != len("SECRET-PAYLOAD") ||
				!strings.Contains(parked[0].LastError, "broker said no") {
				t.Fatalf("parked list: %+v", parked)
			}
			if strings.Contains(list.stdout, "SECRET-PAYLOAD") {
				t.Error("parked list printed a payload")
			}
			table = ctl(t, with("parked", "list")...).ok(t).stdout
			if !strings.Contains(table, k1IDs[0].String()) || !strings.Contains(table, "broker said no second line") || strings.Contains(table, "SECRET-PAYLOAD") {
				t.Errorf("parked list table:\n%s", table)
			}
			if p := decode[[]parkedJSON](t, ctl(t, with("parked", "list", "--json", "-key", "k2")...).ok(t)); len(p) != 0 {
				t.Errorf("parked list -key k2: %+v", p)
			}
			if p := decode[[]parkedJSON](t, ctl(t, with("parked", "list", "--json", "-limit", "1")...).ok(t)); len(p) != 1 {
				t.Errorf("parked list -limit 1: %+v", p)
			}
			if p := decode[[]parkedJSON](t, ctl(t, with("parked", "list", "--json", "-after", k1IDs[0].String())...).ok(t)); len(p) != 1 || p[0].ID != k1IDs[1].String() {
				t.Errorf("parked list -after: %+v", p)
			}
			if st := decode[statsJSON](t, ctl(t, with("stats", "--json")...).ok(t)); st.Parked != 2 {
				t.Errorf("stats parked %d, want 2", st.Parked)
			}

			// Requeue one by id, purge the other by key (only with --yes).
			rq := decode[countJSON](t, ctl(t, with("parked", "requeue", "--json", "-id", k1IDs[0].String())...).ok(t))
			if rq.Rows != 1 {
				t.Errorf("requeue -id: %+v", rq)
			}
			ctl(t, with("parked", "purge", "-key", "k1")...).fails(t, 2, "--yes")
			if p := decode[[]parkedJSON](t, ctl(t, with("parked", "list", "--json")...).ok(t)); len(p) != 1 {
				t.Fatalf("purge without --yes deleted rows: %+v", p)
			}
			pg := ctl(t, with("parked", "purge", "-key", "k1", "--yes")...).ok(t)
			if !strings.Contains(pg.stdout, "purged 1 parked rows") {
				t.Errorf("purge says: %s", pg.stdout)
			}
			st = decode[statsJSON](t, ctl(t, with("stats", "--json")...).ok(t))
			if st.Parked != 0 || st.Eligible != 5 {
				t.Errorf("after requeue and purge: eligible %d parked %d, want 5 and 0", st.Eligible, st.Parked)
			}
			if c := decode[countJSON](t, ctl(t, with("parked", "purge", "-all", "--yes", "--json")...).ok(t)); c.Rows != 0 {
				t.Errorf("purge -all on no parked rows: %+v", c)
			}

			// Leases and members.
			tok := outbox.NewToken()
			if ok, err := store.AcquireLease(ctx, outbox.LeaseParams{Lane: 3, Owner: "fwd-a", Token: tok, TTL: time.Minute}); err != nil || !ok {
				t.Fatalf("acquire: %v %v", ok, err)
			}
			if ok, err := store.AcquireLease(ctx, outbox.LeaseParams{Lane: 5, Owner: "fwd-gone", Token: outbox.NewToken(), TTL: time.Millisecond}); err != nil || !ok {
				t.Fatalf("acquire: %v %v", ok, err)
			}
			time.Sleep(50 * time.Millisecond) // fwd-gone's lease expires on the server's clock
			if err := store.Heartbeat(ctx, "fwd-a", time.Minute); err != nil {
				t.Fatal(err)
			}
			ls := decode[leasesJSON](t, ctl(t, with("leases", "--json")...).ok(t))
			if len(ls.Members) != 1 || ls.Members[0] != "fwd-a" || len(ls.Leases) != 2 || ls.Held["fwd-a"] != 1 {
				t.Fatalf("leases: %+v", ls)
			}
			if l := ls.Leases[0]; l.Lane != 3 || l.Owner != "fwd-a" || !l.Live || l.Token != tok.String() {
				t.Errorf("lease 3: %+v", l)
			}
			if l := ls.Leases[1]; l.Lane != 5 || l.Live {
				t.Errorf("lease 5: %+v", l)
			}
			table = ctl(t, with("leases")...).ok(t).stdout
			for _, w := range []string{"fwd-a  holds 1 lanes", "expired", "live"} {
				if !strings.Contains(table, w) {
					t.Errorf("leases table lacks %q:\n%s", w, table)
				}
			}
		})
	}
}

// A DSN with a password (PostgreSQL here trusts local logins, so any password works):
// no output shows it.
func TestPasswordNeverPrinted(t *testing.T) {
	dsn := testenv.DSN(t, testenv.Postgres)
	const secret = "Pw4Outboxctl"
	withPw := strings.Replace(dsn, "postgres://postgres@", "postgres://postgres:"+secret+"@", 1)
	if withPw == dsn {
		t.Skip("the PostgreSQL DSN is not of the form postgres://postgres@...")
	}
	prefix := testenv.Prefix(t)
	var all strings.Builder
	for _, args := range [][]string{
		{"schema", "apply"}, {"stats"}, {"stats", "--json"}, {"parked", "list"}, {"leases"},
		{"stats", "-prefix", prefix + "missing_"},
	} {
		o := ctl(t, append(args, "-dsn", withPw, "-prefix", prefix)...)
		all.WriteString(o.stdout + o.stderr)
	}
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		o := &opts{dialect: "postgres", prefix: prefix, lanes: outbox.LanesDefault}
		for _, tbl := range o.options().TableNames() {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + qualified(o, tbl))
		}
		db.Close()
	}
	if strings.Contains(all.String(), secret) {
		t.Fatalf("the password appears in the output:\n%s", all.String())
	}
	if !strings.Contains(all.String(), "postgres:xxxxx@") {
		t.Errorf("the redacted DSN is not shown:\n%s", all.String())
	}
}

// OUTBOX_DSN holds a password: help, flag errors, usage errors and failures of every
// command never print it (the flag package prints a flag's default on -h and on any
// flag error, so the DSN is never a flag default).
func TestEnvPasswordNeverPrinted(t *testing.T) {
	const secret = "S3cretPwEnv"
	for _, env := range []string{
		"postgres://app:" + secret + "@127.0.0.1:1/shop?sslmode=disable",
		"app:" + secret + "@tcp(127.0.0.1:1)/shop",
		"host=127.0.0.1 port=1 user=app password=" + secret + " dbname=shop",
	} {
		t.Setenv("OUTBOX_DSN", env)
		var all strings.Builder
		for _, args := range [][]string{
			{"help"}, {"stats", "-h"}, {"leases", "-h"}, {"leases", "--help"}, {"parked", "list", "-h"},
			{"parked", "requeue", "-h"}, {"parked", "purge", "-h"}, {"schema", "apply", "-h"}, {"schema", "print", "-h"},
			{"stats", "-lanes", "x"}, {"stats", "-bogus"}, {"leases", "-timeout", "never"},
			{"stats", "extra"}, {"stats", "-dialect", "oracle"}, {"stats", "-timeout", "-1s"},
			{"parked", "list", "-limit", "0"}, {"parked", "list", "-after", "nope"}, {"parked", "purge", "-all"},
			{"parked", "requeue"}, {"stats", "-timeout", "5s"}, {"stats", "-dsn", env + "x", "-timeout", "5s"},
			{"stats", env},
		} {
			o := ctl(t, args...)
			all.WriteString(o.stdout + o.stderr)
		}
		if strings.Contains(all.String(), secret) {
			t.Fatalf("OUTBOX_DSN=%q: the password appears in the output:\n%s", env, all.String())
		}
		if !strings.Contains(all.String(), "$OUTBOX_DSN") {
			t.Errorf("the help does not name $OUTBOX_DSN:\n%s", all.String())
		}
	}
}

// A PostgreSQL password holding '@': pgx takes what follows its first '@' for the host,
// and its error names that host; no part of the password reaches the output.
func TestPostgresPasswordWithAt(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "")
	o := ctl(t, "stats", "-dsn", "postgres://app:Abc@Secret123@127.0.0.1:5432/test", "-timeout", "10s").fails(t, 1, "cannot connect to")
	if s := o.stdout + o.stderr; strings.Contains(s, "Secret123") || strings.Contains(s, "Abc") {
		t.Fatalf("part of the password appears:\n%s", s)
	}
}

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"orders":              "orders",
		"a\x1b[2Jb":           `a\x1b[2Jb`,
		"bell\x07":            `bell\x07`,
		"csi\u009b31m":        `csi\x9b31m`,
		"rtl\u202eexe.txt":    `rtl\u202eexe.txt`,
		"bad\xffutf8":         `bad\xffutf8`,
		`back\x1b`:            `back\\x1b`,
		"tab\tnl\n":           `tab\x09nl\x0a`,
		"ünïcode ✓":           "ünïcode ✓",
		"\uFFFD kept as text": "\uFFFD kept as text",
	} {
		if got := safe(in, 100); got != want {
			t.Errorf("safe(%q) = %q, want %q", in, got, want)
		}
	}
	if got := safe(strings.Repeat("x", 200), 10); got != strings.Repeat("x", 9)+"…" {
		t.Errorf("safe cuts to %q", got)
	}
}

// Parked rows whose key, topic, type and error carry terminal escape sequences: the
// table shows them escaped; -limit is capped.
func TestParkedListHostile(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			dsn := testenv.DSN(t, d.service)
			prefix := testenv.Prefix(t)
			db, err := sql.Open(d.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := db.Ping(); err != nil {
				testenv.Unavailable(t, d.service, err)
			}
			o := &opts{dialect: d.name, prefix: prefix, lanes: outbox.LanesDefault}
			store, err := newStore(db, o)
			if err != nil {
				t.Fatal(err)
			}
			testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
				var errs []error
				for _, tbl := range o.options().TableNames() {
					if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+qualified(o, tbl)); err != nil {
						errs = append(errs, err)
					}
				}
				return errors.Join(errs...)
			})
			ctx := context.Background()
			if err := store.CreateSchema(ctx); err != nil {
				t.Fatal(err)
			}
			key := "k\x1b[31mred\u009b2J"
			r := outbox.Record{ID: outbox.NewID(), MessageUUID: "u1", Lane: lanes.Of(key, outbox.LanesDefault), OrderingKey: key,
				Destination: "t\x1b]0;pwned\x07", MessageType: "ty\u202epe", Headers: []byte{1, 0, 0, 0, 0, 0, 0, 0},
				Body: []byte("x"), CreatedAt: time.Now()}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Insert(ctx, tx, []outbox.Record{r}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if ok, err := store.Park(ctx, r.ID, "boom\x1b[2J\x1b[H\u009b6n", time.Now()); err != nil || !ok {
				t.Fatalf("park: %v %v", ok, err)
			}
			base := []string{"-dialect", d.name, "-dsn", dsn, "-prefix", prefix}
			out := ctl(t, append([]string{"parked", "list"}, base...)...).ok(t).stdout
			for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e"} {
				if strings.Contains(out, bad) {
					t.Errorf("parked list prints %q raw:\n%q", bad, out)
				}
			}
			for _, want := range []string{`k\x1b[31mred\x9b2J`, `t\x1b]0;pwned\x07`, `ty\u202epe`, `boom\x1b[2J\x1b[H\x9b6n`} {
				if !strings.Contains(out, want) {
					t.Errorf("parked list lacks %s:\n%s", want, out)
				}
			}
			// --json keeps the exact text (JSON escapes the control characters).
			if p := decode[[]parkedJSON](t, ctl(t, append([]string{"parked", "list", "--json"}, base...)...).ok(t)); len(p) != 1 || p[0].OrderingKey != key {
				t.Errorf("parked list --json: %+v", p)
			}
			ctl(t, append([]string{"parked", "list", "-limit", "1000000"}, base...)...).fails(t, 2, "-limit must be between 1 and 1000")
		})
	}
}

// schema apply over a MySQL rows table of the earlier schema (keyed by id): it says the
// table is outdated and how to migrate it, never "schema applied".
func TestSchemaApplyOutdatedMySQL(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "")
	dsn := testenv.DSN(t, testenv.MySQL)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		testenv.Unavailable(t, testenv.MySQL, err)
	}
	prefix := testenv.Prefix(t)
	o := &opts{dialect: "mysql", prefix: prefix, lanes: outbox.LanesDefault}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tbl := range o.options().TableNames() {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+qualified(o, tbl)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if _, err := db.Exec("CREATE TABLE " + qualified(o, o.options().OutboxTable()) + " (id BINARY(16) NOT NULL PRIMARY KEY, lane INT NULL)"); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, "schema", "apply", "-dialect", "mysql", "-dsn", dsn, "-prefix", prefix).fails(t, 1, "predates the current schema", "docs/operations.md")
	if strings.Contains(r.stdout, "schema applied") {
		t.Fatalf("schema apply says it applied:\n%s", r.stdout)
	}
}

// stats with the three-table grants docs/operations.md recommends (no grant on the
// inbox tables), and with an inbox table another session holds locked: the backlog is
// printed, the inbox section says why it is missing, and the command succeeds.
func TestStatsInboxSectionFails(t *testing.T) {
	t.Setenv("OUTBOX_DSN", "")
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			dsn := testenv.DSN(t, d.service)
			prefix := testenv.Prefix(t)
			db, err := sql.Open(d.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := db.Ping(); err != nil {
				testenv.Unavailable(t, d.service, err)
			}
			o := &opts{dialect: d.name, prefix: prefix, lanes: outbox.LanesDefault}
			testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
				var errs []error
				for _, tbl := range o.options().TableNames() {
					if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+qualified(o, tbl)); err != nil {
						errs = append(errs, err)
					}
				}
				return errors.Join(errs...)
			})
			store, err := newStore(db, o)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := store.CreateSchema(ctx); err != nil {
				t.Fatal(err)
			}
			ob, err := publisher.New(store, publisher.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
				if _, err := store.(outbox.Inbox).RecordInbox(ctx, tx.SQLTx(), "billing", "m1", time.Now()); err != nil {
					return err
				}
				return tx.Publish("orders", message.NewMessage("a", nil), message.NewMessage("b", nil), message.NewMessage("c", nil))
			})
			if err != nil {
				t.Fatal(err)
			}

			// A user with the three-table grants.
			restricted := restrictedUser(t, db, d.name, dsn, o)
			base := []string{"-dialect", d.name, "-prefix", prefix}
			r := ctl(t, append([]string{"stats", "-dsn", restricted}, base...)...).ok(t)
			denied := map[string]string{"mysql": "denied", "postgres": "permission denied"}[d.name]
			if !strings.Contains(r.stdout, "backlog   3 eligible rows") || !strings.Contains(r.stdout, "WARNING: not read") || !strings.Contains(r.stdout, denied) {
				t.Errorf("stats with the three-table grants:\n%s", r.stdout)
			}
			st := decode[statsJSON](t, ctl(t, append([]string{"stats", "--json", "-dsn", restricted}, base...)...).ok(t))
			if st.Eligible != 3 || st.Inbox == nil || !strings.Contains(st.Inbox.Error, denied) {
				t.Errorf("stats --json with the three-table grants: %+v, inbox %+v", st, st.Inbox)
			}

			// An inbox table locked by another session: the section times out.
			release := lockTable(t, db, d.name, qualified(o, o.options().InboxTable()))
			r = ctl(t, append([]string{"stats", "-dsn", dsn, "-timeout", "4s"}, base...)...).ok(t)
			release()
			if !strings.Contains(r.stdout, "backlog   3 eligible rows") || !strings.Contains(r.stdout, "timed out") {
				t.Errorf("stats over a locked inbox table:\n%s", r.stdout)
			}
			// And without the lock, the figures.
			st = decode[statsJSON](t, ctl(t, append([]string{"stats", "--json", "-dsn", dsn}, base...)...).ok(t))
			if st.Inbox == nil || st.Inbox.Error != "" || st.Inbox.Entries != 1 || st.Inbox.Partial {
				t.Errorf("stats --json: inbox %+v", st.Inbox)
			}
		})
	}
}

// restrictedUser creates a login with SELECT, INSERT, UPDATE and DELETE on the outbox,
// lanes and nodes tables only (docs/operations.md, Privileges), dropped at the end, and
// returns its DSN.
func restrictedUser(t *testing.T, db *sql.DB, dialect, dsn string, o *opts) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	user, pw := "octl_"+hex.EncodeToString(b[:]), "Pw"+hex.EncodeToString(b[:])
	tables := []string{o.options().OutboxTable(), o.options().LanesTable(), o.options().NodesTable()}
	var stmts []string
	var drop string
	var restricted string
	switch dialect {
	case "postgres":
		stmts = append(stmts, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", user, pw))
		for _, tbl := range tables {
			stmts = append(stmts, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s", qualified(o, tbl), user))
		}
		drop = "DROP OWNED BY " + user + "; DROP ROLE " + user
		restricted = strings.Replace(dsn, "postgres://postgres@", "postgres://"+user+":"+pw+"@", 1)
	default:
		stmts = append(stmts, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, pw))
		for _, tbl := range tables {
			stmts = append(stmts, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO '%s'@'%%'", qualified(o, tbl), user))
		}
		drop = fmt.Sprintf("DROP USER '%s'@'%%'", user)
		restricted = strings.Replace(dsn, "root@", user+":"+pw+"@", 1)
	}
	if restricted == dsn {
		t.Skipf("the %s DSN is not of the form the test rewrites: %s", dialect, dsn)
	}
	testenv.Cleanup(t, "drop the restricted user", func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, drop)
		return err
	})
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return restricted
}

// lockTable holds table locked against readers from another session until release.
func lockTable(t *testing.T, db *sql.DB, dialect, table string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lock, unlock := "LOCK TABLES "+table+" WRITE", "UNLOCK TABLES"
	if dialect == "postgres" {
		lock, unlock = "BEGIN; LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE", "ROLLBACK"
	}
	if _, err := conn.ExecContext(ctx, lock); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(cctx, unlock)
		conn.Close()
	}
	t.Cleanup(release)
	return release
}

// Whatever a message holds, safe's output is valid UTF-8 without control or format
// characters.
func FuzzSafe(f *testing.F) {
	for _, s := range []string{"", "orders", "a\x1b[2Jb", "\u009b", "\u202e", "bad\xff", `\x1b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := safe(s, 80)
		if !utf8.ValidString(out) {
			t.Fatalf("safe(%q) = %q: not UTF-8", s, out)
		}
		for _, r := range out {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("safe(%q) = %q holds %U", s, out, r)
			}
		}
		if n := utf8.RuneCountInString(out); n > 80*6 {
			t.Fatalf("safe(%q) is %d characters", s, n)
		}
	})
}
