package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/mysql"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.UTC)

// newStore makes a store with fresh tables over db, dropped when t ends.
func newStore(t testing.TB, db *sql.DB, lanes int) *mysql.Store {
	t.Helper()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: lanes}
	s, err := mysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	dropTables(t, db, opts)
	if err := s.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

var testHeaders = headercodec.Encode(nil, []headercodec.Header{{Name: "k", Value: []byte("v")}})

func record(key string, laneCount int, body []byte) outbox.Record {
	r := outbox.Record{
		ID:          outbox.NewID(),
		MessageUUID: "uuid",
		Lane:        outbox.Unordered,
		Destination: "topic",
		Headers:     testHeaders,
		Body:        body,
		CreatedAt:   t0,
	}
	if key != "" {
		r.OrderingKey = key
		r.Lane = lanes.Of(key, laneCount)
	}
	return r
}

func insert(t testing.TB, ctx context.Context, db *sql.DB, s *mysql.Store, recs []outbox.Record) {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, tx, recs); err != nil {
		_ = tx.Rollback()
		t.Fatalf("Insert(%d rows): %v", len(recs), err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func countRows(t testing.TB, db *sql.DB, s *mysql.Store) int64 {
	t.Helper()
	var n int64
	q := "SELECT COUNT(*) FROM " + mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCreateScript(t *testing.T) {
	script, err := mysql.CreateScript(outbox.Options{Schema: "app`db", TablePrefix: "orders`x_"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS `app``db`.`orders``x_outbox` (",
		"CREATE TABLE IF NOT EXISTS `app``db`.`orders``x_outbox_lanes` (",
		"CREATE TABLE IF NOT EXISTS `app``db`.`orders``x_outbox_nodes` (",
		"id               BINARY(16)      NOT NULL",
		"created_at       DATETIME(6)     NOT NULL",
		"claim_token      BINARY(16)      NULL",
		"headers          LONGBLOB        NOT NULL",
		"lane             INT             NOT NULL DEFAULT -1",
		"PRIMARY KEY (lane, seq, id)",
		"seq              BIGINT          NOT NULL AUTO_INCREMENT",
		"deliver_at       DATETIME(6)     NOT NULL DEFAULT (created_at)",
		"CHECK (id <> X'00000000000000000000000000000000')",
		"CHECK (LENGTH(headers) >= 8)",
		"CHECK (attempts >= 0)",
		"CHECK ((status = 'pending' AND lane >= -1) OR (status = 'parked' AND lane < -1))",
		"ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
		"CREATE TABLE IF NOT EXISTS `app``db`.`orders``x_inbox` (",
		"CREATE TABLE IF NOT EXISTS `app``db`.`orders``x_inbox_lease` (",
		"PRIMARY KEY (consumer, message_uuid)",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	if rows, _, _ := strings.Cut(script, ";\n"); strings.Count(rows, "\n    KEY ") != 1 || !strings.Contains(rows, "KEY ix_seq (seq)") || strings.Contains(rows, "INDEX") {
		t.Error("the rows table has a secondary index besides ix_seq (seq), which InnoDB requires of an AUTO_INCREMENT column")
	}
	if n := strings.Count(script, "CREATE TABLE IF NOT EXISTS"); n != 5 {
		t.Errorf("script has %d CREATE TABLE statements, want 5", n)
	}
	if n := strings.Count(script, ";\n"); n != 5 {
		t.Errorf("script has %d statement terminators, want 5", n)
	}
	// Without a schema the names are unqualified.
	script, err = mysql.CreateScript(outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "CREATE TABLE IF NOT EXISTS `outbox` (") {
		t.Errorf("default script:\n%s", script)
	}
}

func TestPrefixRules(t *testing.T) {
	ok := []string{
		strings.Repeat("p", mysql.MaxTablePrefixChars),
		strings.Repeat("é", mysql.MaxTablePrefixChars), // 104 bytes, 52 characters
		"a`b_", "\uFFFD_", "with space ",
	}
	for _, p := range ok {
		if _, err := mysql.New(&sql.DB{}, outbox.Options{TablePrefix: p}); err != nil {
			t.Errorf("prefix %q rejected: %v", p, err)
		}
	}
	bad := []struct{ prefix, schema, contains string }{
		{strings.Repeat("p", mysql.MaxTablePrefixChars+1), "", "TablePrefix: is 53 characters long; at most 52"},
		{"a\x00b", "", "TablePrefix"},
		{"a\U0001F600b", "", "TablePrefix: contains the supplementary character U+1F600"},
		{"a\xffb", "", "TablePrefix"},
		{"", strings.Repeat("s", 65), "Schema: is 65 characters long; at most 64"},
		{"", "s\U00010348", "Schema: contains the supplementary character"},
		{"", "db ", "Schema: ends with a space"},
		{"", "d\x00b", "Schema"},
	}
	for _, c := range bad {
		opts := outbox.Options{TablePrefix: c.prefix, Schema: c.schema}
		_, errNew := mysql.New(&sql.DB{}, opts)
		_, errScript := mysql.CreateScript(opts)
		for _, err := range []error{errNew, errScript} {
			if !errors.Is(err, outbox.ErrInvalidOptions) || !strings.Contains(fmt.Sprint(err), c.contains) {
				t.Errorf("options %+v: error %v; want ErrInvalidOptions containing %q", opts, err, c.contains)
			}
		}
	}
}

// A schema (database) other than the DSN's is quoted and used by every statement.
func TestSchemaQualified(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	schema := "outbox`test " + testenv.Prefix(t)[2:8]
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+"`"+strings.ReplaceAll(schema, "`", "``")+"`"); err != nil {
		t.Fatal(err)
	}
	testenv.Cleanup(t, "drop database "+schema, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "DROP DATABASE `"+strings.ReplaceAll(schema, "`", "``")+"`")
		return err
	})
	s, err := mysql.New(db, outbox.Options{Schema: schema, TablePrefix: "p_"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	insert(t, ctx, db, s, []outbox.Record{record("", 64, []byte("x"))})
	if n, err := s.Count(ctx, t0); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v", n, err)
	}
}

// One Insert whose rows add up to more than the server's max_allowed_packet (16 MiB on
// MariaDB here, while the driver assumes 64 MiB) and more placeholders than a prepared
// statement takes, through both DSN forms.
func TestInsertChunking(t *testing.T) {
	smallPacket := dsnVariant{"driver-max-packet-4MiB", func(c *driver.Config) { c.MaxAllowedPacket = 4 << 20 }}
	for _, v := range []dsnVariant{plainDSN, otherDSN, smallPacket} {
		t.Run(v.name, func(t *testing.T) {
			db := openDB(t, v)
			ctx := t.Context()
			var maxPacket int64
			if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, db, 8)

			// Big rows: 1.5 x max_allowed_packet in 256 KiB bodies of varied bytes
			// (quotes, backslashes and NULs that interpolation escapes).
			body := bytes.Repeat([]byte("ab'\\\x00\"\n\x1a"), 32<<10)
			var big []outbox.Record
			for total := 0; total < int(maxPacket*3/2); total += len(body) {
				big = append(big, record("", 8, body))
			}
			insert(t, ctx, db, s, big)

			// Many small rows: over 65,535 placeholders in all, and over the 2 MiB up to
			// which the store inlines values, so the chunks bind parameters.
			small := make([]outbox.Record, 12000)
			for i := range small {
				small[i] = record(fmt.Sprintf("k%d", i%50), 8, bytes.Repeat([]byte("s"), 60))
			}
			insert(t, ctx, db, s, small)

			if n := countRows(t, db, s); n != int64(len(big)+len(small)) {
				t.Fatalf("%d rows stored, want %d", n, len(big)+len(small))
			}
			got, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: t0}, make([]outbox.Record, len(big)))
			if err != nil || len(got) != len(big) {
				t.Fatalf("Read = %d rows, %v", len(got), err)
			}
			for i := range got {
				if got[i].ID != big[i].ID || !bytes.Equal(got[i].Body, body) {
					t.Fatalf("row %d: id %s, %d body bytes (equal: %v)", i, got[i].ID, len(got[i].Body), bytes.Equal(got[i].Body, body))
				}
			}
		})
	}
}

// A claimer holding its row locks (transaction open after SELECT ... FOR UPDATE SKIP
// LOCKED) does not block writers: at READ COMMITTED there are no gap locks.
func TestClaimDoesNotBlockInserts(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	s := newStore(t, db, 4)
	key := "key"
	lane := lanes.Of(key, 4)
	var recs []outbox.Record
	for i := 0; i < 20; i++ {
		recs = append(recs, record("", 4, []byte("u")), record(key, 4, []byte("o")))
	}
	insert(t, ctx, db, s, recs)
	lease := outbox.NewToken()
	if ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: "t", Token: lease, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}

	// The first case's writer adds a lane row that the second case claims too.
	for i, c := range []outbox.ClaimParams{
		{Lane: outbox.Unordered, Limit: 100},
		{Lane: lane, Limit: 100, Lease: lease},
	} {
		t.Run(fmt.Sprintf("lane %d", c.Lane), func(t *testing.T) {
			locked, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			mysql.SetAfterLock(s, func() {
				once.Do(func() {
					close(locked)
					<-release
				})
			})
			defer mysql.SetAfterLock(s, nil)
			c.Now, c.Until, c.Token = t0, t0.Add(time.Minute), outbox.NewToken()
			done := make(chan error, 1)
			var claimed []outbox.Record
			go func() {
				var err error
				claimed, err = s.Claim(ctx, c, nil)
				done <- err
			}()
			select {
			case <-locked:
			case err := <-done:
				t.Fatalf("Claim returned before locking rows: %v", err)
			}
			// Writers add rows behind (and among) the locked ones, in both kinds.
			ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			tx, err := db.BeginTx(ictx, nil)
			if err != nil {
				close(release)
				t.Fatal(err)
			}
			err = s.Insert(ictx, tx, []outbox.Record{record("", 4, []byte("new")), record(key, 4, []byte("new"))})
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
			close(release)
			if err != nil {
				t.Fatalf("insert while a claim holds its locks: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Claim: %v", err)
			}
			if len(claimed) != 20+i {
				t.Fatalf("claimed %d rows, want %d", len(claimed), 20+i)
			}
		})
	}
}

// Deadlocks (1213) and lock wait timeouts (1205) reach the caller as retryable errors;
// a store operation chosen as a deadlock victim runs again by itself.
func TestErrorTranslation(t *testing.T) {
	t.Run("deadlock", func(t *testing.T) {
		db := openDB(t, plainDSN)
		ctx := t.Context()
		s := newStore(t, db, 4)
		recs := []outbox.Record{record("", 4, []byte("a")), record("", 4, []byte("b"))}
		insert(t, ctx, db, s, recs)
		table := mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())
		lock := func(tx *sql.Tx, r outbox.Record) error {
			_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET attempts = attempts + 1 WHERE "+rowWhere(r.Lane), r.ID[:])
			return err
		}
		tx1, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback()
		tx2, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		if err := lock(tx1, recs[0]); err != nil {
			t.Fatal(err)
		}
		if err := lock(tx2, recs[1]); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		go func() { errs <- lock(tx1, recs[1]) }()
		waitForLockWait(t, db, s.Options().TablePrefix, nil)
		go func() { errs <- lock(tx2, recs[0]) }()
		// One of the two is the victim (its transaction is rolled back, so the other goes on).
		err = errors.Join(<-errs, <-errs)
		var me *driver.MySQLError
		if !errors.As(err, &me) || me.Number != 1213 {
			t.Fatalf("crossed locks: %v; want deadlock 1213", err)
		}
		translated := mysql.Translate(err)
		if !outbox.IsRetryable(translated) || !errors.As(translated, &me) {
			t.Fatalf("Translate(%v) = %v; want retryable, MySQLError reachable", err, translated)
		}
	})

	t.Run("deadlock victim retried", func(t *testing.T) {
		db := openDB(t, plainDSN)
		ctx := t.Context()
		s := newStore(t, db, 4)
		recs := make([]outbox.Record, 202)
		for i := range recs {
			recs[i] = record("", 4, []byte("d"))
		}
		insert(t, ctx, db, s, recs)
		a, b := recs[0], recs[1]
		tok := outbox.NewToken()
		claimed, err := s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 2, Now: t0, Until: t0.Add(time.Hour), Token: tok}, nil)
		if err != nil || len(claimed) != 2 {
			t.Fatalf("Claim = %d, %v", len(claimed), err)
		}
		table := mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())
		deadlocks := func() int64 {
			var name string
			var n int64
			if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n); err != nil {
				t.Skipf("no Innodb_deadlocks counter: %v", err)
			}
			return n
		}
		before := deadlocks()

		// The other transaction is heavier (it changed 200 rows), so InnoDB picks the
		// store's DELETE as the deadlock victim.
		other, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback()
		if _, err := other.ExecContext(ctx, "UPDATE "+table+" SET attempts = attempts + 1 WHERE lane = -1 AND seq = -1 AND id >= ?", recs[2].ID[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := other.ExecContext(ctx, "UPDATE "+table+" SET attempts = 1 WHERE "+rowWhere(b.Lane), b.ID[:]); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		var n int
		go func() {
			// Locks a, then waits for b.
			var err error
			n, err = s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{a.ID, b.ID}, Now: t0, Lane: outbox.Unordered})
			done <- err
		}()
		waitForLockWait(t, db, s.Options().TablePrefix, done)
		if _, err := other.ExecContext(ctx, "UPDATE "+table+" SET attempts = 1 WHERE "+rowWhere(a.Lane), a.ID[:]); err != nil {
			t.Fatalf("the other transaction: %v", err)
		}
		if got := deadlocks(); got <= before {
			t.Fatalf("Innodb_deadlocks %d -> %d: no deadlock happened", before, got)
		}
		// The retried DELETE now waits for the other transaction, which gives up.
		if err := other.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil || n != 2 {
			t.Fatalf("Complete as a deadlock victim = %d, %v; want 2, nil (retried)", n, err)
		}
	})

	t.Run("lock wait timeout", func(t *testing.T) {
		db := openDB(t, dsnVariant{"lock-wait-1s", func(c *driver.Config) {
			if c.Params == nil {
				c.Params = map[string]string{}
			}
			c.Params["innodb_lock_wait_timeout"] = "1"
		}})
		ctx := t.Context()
		s := newStore(t, db, 4)
		r := record("", 4, []byte("w"))
		insert(t, ctx, db, s, []outbox.Record{r})
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		table := mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())
		if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET attempts = 1 WHERE "+rowWhere(r.Lane), r.ID[:]); err != nil {
			t.Fatal(err)
		}
		_, err = s.Park(ctx, r.ID, "blocked", t0)
		var me *driver.MySQLError
		if !errors.As(err, &me) || me.Number != 1205 || !outbox.IsRetryable(err) {
			t.Fatalf("Park under a held lock = %v; want retryable 1205", err)
		}
	})
}

// waitForLockWait waits until a statement on the tables of prefix waits for a row lock.
func waitForLockWait(t *testing.T, db *sql.DB, prefix string, done <-chan error) {
	t.Helper()
	// MariaDB lists lock waits in information_schema.innodb_trx. Oracle MySQL fails any
	// read of that table (error 3854) while a waiting statement's text holds binary
	// bytes (our ids), so there the waits come from performance_schema.
	q := "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT' AND INSTR(trx_query, ?) > 0"
	arg := prefix
	if !isMariaDB(t, db) {
		q = "SELECT COUNT(*) FROM performance_schema.data_lock_waits w JOIN performance_schema.data_locks l " +
			"ON l.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID WHERE l.OBJECT_NAME LIKE CONCAT(?, '%')"
		arg = strings.ReplaceAll(prefix, "_", "\\_")
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if done != nil {
			select {
			case err := <-done:
				t.Fatalf("the statement that should wait for a lock returned: %v", err)
			default:
			}
		}
		var n int
		if err := db.QueryRow(q, arg).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		// information_schema.innodb_trx is a cache refreshed only when it was not read for
		// 100 ms: polling faster would read the same stale snapshot forever.
		time.Sleep(150 * time.Millisecond)
	}
	t.Fatal("no transaction started waiting for a lock")
}

// isMariaDB reports whether db is a MariaDB server (else Oracle MySQL).
func isMariaDB(t testing.TB, db *sql.DB) bool {
	t.Helper()
	var v string
	if err := db.QueryRow("SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(v, "MariaDB")
}

// The longest prefix (52 characters, with a backtick and non-ASCII BMP characters) makes
// 64-character table names that work end to end.
func TestLongestPrefix(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	p := testenv.Prefix(t) // 15 characters
	p += "é`ü" + strings.Repeat("ø", mysql.MaxTablePrefixChars-len([]rune(p))-3)
	opts := outbox.Options{TablePrefix: p, Lanes: 4}
	s, err := mysql.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	dropTables(t, db, opts)
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	r := record("k", 4, []byte("x"))
	insert(t, ctx, db, s, []outbox.Record{r})
	lease := outbox.NewToken()
	if ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: r.Lane, Token: lease, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	got, err := s.Claim(ctx, outbox.ClaimParams{Lane: r.Lane, Limit: 1, Now: t0, Until: t0.Add(time.Minute), Token: outbox.NewToken(), Lease: lease}, nil)
	if err != nil || len(got) != 1 || got[0].ID != r.ID {
		t.Fatalf("Claim = %v, %v", got, err)
	}
}

// With HoldParkedKeys and Limit 1, a claim looks past many held rows (the store reads
// the lane head in growing pages) and still stops at the first row that holds the lane.
func TestHoldParkedKeysPaging(t *testing.T) {
	db := openDB(t, plainDSN)
	ctx := t.Context()
	s := newStore(t, db, 1) // one lane: every key shares it
	held := record("held", 1, []byte("p"))
	var recs []outbox.Record
	recs = append(recs, held)
	for i := 0; i < 40; i++ {
		recs = append(recs, record("held", 1, []byte("h")))
	}
	free := record("free", 1, []byte("f"))
	late := record("late", 1, []byte("l"))
	late.DeliverAt = t0.Add(time.Hour)
	after := record("after", 1, []byte("a"))
	recs = append(recs, free, late, after)
	insert(t, ctx, db, s, recs)
	if ok, err := s.Park(ctx, held.ID, "poison", t0); err != nil || !ok {
		t.Fatalf("Park = %v, %v", ok, err)
	}
	lease := outbox.NewToken()
	if ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: 0, Token: lease, TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	claim := func(limit int) []outbox.ID {
		got, err := s.Claim(ctx, outbox.ClaimParams{Lane: 0, Limit: limit, Now: t0, Until: t0.Add(time.Minute), Token: outbox.NewToken(), Lease: lease, HoldParkedKeys: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []outbox.ID
		for _, r := range got {
			ids = append(ids, r.ID)
		}
		return ids
	}
	if got := claim(1); len(got) != 1 || got[0] != free.ID {
		t.Fatalf("Claim(limit 1) = %v; want the free key's row %s past 40 held rows", got, free.ID)
	}
	// The claimed row now holds the lane (live claim); once it expires, "late" (not due)
	// does, so "after" is never taken before it.
	if got := claim(5); len(got) != 0 {
		t.Fatalf("Claim behind a live claim = %v; want none", got)
	}
	if _, err := s.Complete(ctx, outbox.CompleteParams{Token: outbox.Token{1}, IDs: []outbox.ID{free.ID}, Now: t0, Lane: outbox.Unordered}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, outbox.ClaimParams{Lane: 0, Limit: 5, Now: t0.Add(2 * time.Minute), Until: t0.Add(3 * time.Minute), Token: outbox.NewToken(), Lease: lease, HoldParkedKeys: true}, nil)
	if err != nil || len(got) != 1 || got[0].ID != free.ID {
		t.Fatalf("Claim after the claim expired = %d rows, %v; want the free row again, then the lane held by the row not due", len(got), err)
	}
}

// Values with quotes, backslashes, NUL, '?' and non-ASCII text survive both insert paths:
// small chunks inline every value as a hex literal, large ones bind parameters.
func TestInsertPathsRoundTrip(t *testing.T) {
	for _, v := range []dsnVariant{plainDSN, otherDSN} {
		t.Run(v.name, func(t *testing.T) {
			db := openDB(t, v)
			ctx := t.Context()
			s := newStore(t, db, 8)
			odd := "q'uo\"te \\ back\x00nul ? `tick` é ø 日本 \u00a0"
			mk := func(body []byte) outbox.Record {
				r := record(odd, 8, body)
				r.MessageUUID, r.Transport, r.Destination, r.MessageType, r.TenantID = odd+"u", odd+"t", odd+"d", odd+"m", odd+"x"
				r.Headers = headercodec.Encode(nil, []headercodec.Header{{Name: odd, Value: []byte(odd)}})
				return r
			}
			small := []outbox.Record{mk([]byte(odd)), mk(nil)}
			big := []outbox.Record{mk(bytes.Repeat([]byte(odd), 40_000)), mk([]byte(odd))} // > 1 MiB: bound
			for _, batch := range [][]outbox.Record{small, big} {
				insert(t, ctx, db, s, batch)
				checkReadBack(t, s, batch)
			}
		})
	}
}

// A batch's full groups of rows go through the prepared INSERT once it is prepared (the
// server counts one statement execution per group), and their values come back as
// stored through text; a connection whose character set is not utf8mb4 sends
// everything as text, so its strings are stored byte for byte too.
func TestInsertPreparedGroups(t *testing.T) {
	latin1 := dsnVariant{"charset-latin1", func(c *driver.Config) { c.Collation = "latin1_swedish_ci" }}
	connLatin1 := dsnVariant{"character-set-connection-latin1", func(c *driver.Config) {
		c.Params = map[string]string{"character_set_connection": "latin1"}
	}}
	for _, v := range []dsnVariant{plainDSN, otherDSN, latin1, connLatin1} {
		t.Run(v.name, func(t *testing.T) {
			db := openDB(t, v)
			ctx := t.Context()
			s := newStore(t, db, 8)
			odd := "q'uo\"te \\ back\x00nul ? `tick` é ø 日本 \u00a0 🙂"
			mk := func(i int) outbox.Record {
				r := record(odd, 8, []byte(fmt.Sprintf("%s %d", odd, i)))
				r.MessageUUID, r.Destination = fmt.Sprintf("%s-%d", odd, i), odd+"d"
				if i%2 == 0 { // every optional column in one group, none in the next
					r.Transport, r.MessageType, r.TenantID = odd+"t", odd+"m", odd+"x"
					r.Headers = headercodec.Encode(nil, []headercodec.Header{{Name: odd, Value: []byte(odd)}})
				} else if i%3 == 0 {
					r.Headers, r.Body = nil, nil
				}
				return r
			}
			n := 2*mysql.PreparedRows + 3
			batch := make([]outbox.Record, n)
			for i := range batch {
				batch[i] = mk(i)
			}
			insert(t, ctx, db, s, batch[:mysql.PreparedRows]) // starts preparing
			for i := range batch {
				batch[i].ID = outbox.NewID()
			}
			want := 0
			if v.name != latin1.name && v.name != connLatin1.name {
				want = 1
				deadline := time.Now().Add(10 * time.Second)
				for mysql.PreparedInserts(s) == 0 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
			}

			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			executes := func() int {
				var name string
				var n int
				if err := tx.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_execute'").Scan(&name, &n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := executes()
			if err := s.Insert(ctx, tx, batch); err != nil {
				t.Fatal(err)
			}
			// Both groups mix rows with and without the optional columns: one statement.
			if got := executes() - before; got != 2*want {
				t.Errorf("%d prepared executions for %d rows, want %d", got, n, 2*want)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if want == 1 && mysql.PreparedInserts(s) == 0 {
				t.Error("no prepared statement after the batch")
			}

			// A transaction of another *sql.DB (publisher's BeginDB) goes as text.
			other := openDB(t, v)
			otx, err := other.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer otx.Rollback()
			var name string
			var n0, n1 int
			if err := otx.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_execute'").Scan(&name, &n0); err != nil {
				t.Fatal(err)
			}
			foreign := make([]outbox.Record, n)
			for i := range foreign {
				foreign[i] = mk(i)
			}
			if err := s.Insert(ctx, otx, foreign); err != nil {
				t.Fatalf("Insert in another pool's transaction: %v", err)
			}
			if err := otx.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_execute'").Scan(&name, &n1); err != nil {
				t.Fatal(err)
			}
			if n1 != n0 {
				t.Errorf("%d prepared executions in another pool's transaction, want 0", n1-n0)
			}
			if err := otx.Commit(); err != nil {
				t.Fatal(err)
			}
			batch = append(batch, foreign...)

			// The stored bytes, whatever the connection's character set.
			table := mysql.QualifiedTable(s.Options(), s.Options().OutboxTable())
			for i, w := range batch {
				var uuid, dest, transport, typ, tenant string
				err := db.QueryRowContext(ctx, "SELECT HEX(message_uuid), HEX(destination), HEX(transport), HEX(COALESCE(message_type, '')), HEX(COALESCE(tenant_id, '')) FROM "+table+" WHERE id = X'"+fmt.Sprintf("%x", w.ID[:])+"'").
					Scan(&uuid, &dest, &transport, &typ, &tenant)
				if err != nil {
					t.Fatalf("row %d: %v", i, err)
				}
				hx := func(s string) string { return strings.ToUpper(fmt.Sprintf("%x", s)) }
				if uuid != hx(w.MessageUUID) || dest != hx(w.Destination) || transport != hx(w.Transport) || typ != hx(w.MessageType) || tenant != hx(w.TenantID) {
					t.Fatalf("row %d stored other bytes: uuid %s dest %s transport %s type %s tenant %s", i, uuid, dest, transport, typ, tenant)
				}
			}
			if v.name == latin1.name {
				return // reads convert to the connection's character set
			}
			checkReadBack(t, s, batch)
		})
	}
}

// checkReadBack reads the rows of batch (due at t0, all in batch[0]'s lane, among at
// most a few times as many others) and fails t where one differs from what was
// inserted (no headers read back as the empty encoding; instants as inserted,
// deliver_at defaulted).
func checkReadBack(t *testing.T, s *mysql.Store, batch []outbox.Record) {
	t.Helper()
	rows, err := s.Read(t.Context(), outbox.ReadQuery{Lane: batch[0].Lane, Now: t0}, make([]outbox.Record, 4*len(batch)+16))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[outbox.ID]outbox.Record{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	for i, w := range batch {
		r, ok := byID[w.ID]
		if !ok {
			t.Fatalf("row %d not read back", i)
		}
		wh := w.Headers
		if len(wh) == 0 {
			wh = headercodec.Encode(nil, nil)
		}
		if r.MessageUUID != w.MessageUUID || r.OrderingKey != w.OrderingKey || r.Transport != w.Transport ||
			r.Destination != w.Destination || r.MessageType != w.MessageType || r.TenantID != w.TenantID ||
			!bytes.Equal(r.Headers, wh) || !bytes.Equal(r.Body, w.Body) || !r.CreatedAt.Equal(w.CreatedAt) ||
			!r.DeliverAt.Equal(w.CreatedAt) || r.Corrupt != nil {
			t.Errorf("row %d differs: got uuid %q key %q transport %q dest %q type %q tenant %q, %d header and %d body bytes, created %s, deliver %s (corrupt %v)",
				i, r.MessageUUID, r.OrderingKey, r.Transport, r.Destination, r.MessageType, r.TenantID, len(r.Headers), len(r.Body), r.CreatedAt, r.DeliverAt, r.Corrupt)
		}
	}
}

// dropTables drops the tables of opts when the test ends, bounded by a deadline.
func dropTables(t testing.TB, db *sql.DB, opts outbox.Options) {
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, table := range opts.TableNames() {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+mysql.QualifiedTable(opts, table)); err != nil {
				errs = append(errs, fmt.Errorf("drop %s: %w", table, err))
			}
		}
		return errors.Join(errs...)
	})
}

// TestServerFlavor guards the two MySQL passes of `make test`: OUTBOX_TEST_MYSQL_SERVER
// says which engine OUTBOX_TEST_MYSQL_DSN must be ("mariadb" or "mysql", for Oracle
// MySQL 8 or later), so that a pass meant for one engine cannot run on the other.
func TestServerFlavor(t *testing.T) {
	want := os.Getenv("OUTBOX_TEST_MYSQL_SERVER")
	db := openDB(t, plainDSN)
	var version, comment string
	if err := db.QueryRowContext(t.Context(), "SELECT VERSION(), @@version_comment").Scan(&version, &comment); err != nil {
		t.Fatal(err)
	}
	t.Logf("server: %s (%s)", version, comment)
	mariadb := strings.Contains(version, "MariaDB")
	major, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	switch want {
	case "":
	case "mariadb":
		if !mariadb {
			t.Fatalf("OUTBOX_TEST_MYSQL_SERVER=mariadb but the server is %s (%s)", version, comment)
		}
	case "mysql":
		if mariadb || major < 8 {
			t.Fatalf("OUTBOX_TEST_MYSQL_SERVER=mysql wants Oracle MySQL 8 or later; the server is %s (%s)", version, comment)
		}
	default:
		t.Fatalf("OUTBOX_TEST_MYSQL_SERVER=%q: want mariadb or mysql", want)
	}
}
