package inbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxtest"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// BenchmarkHandlerTx measures one handler transaction (one business INSERT, one
// outgoing outbox message) through publisher's Middleware without the inbox
// (baseline), with Inbox.OutboxMiddleware (fused: the record travels with the BEGIN), with
// publisher's Middleware around Inbox.Middleware (separate: the record is the statement
// after the BEGIN), and for a duplicate (fused, skipped), plus the baseline with one
// extra trivial statement (SELECT 1: the price of one more round trip, which is what
// the separate wiring adds), interleaved in one loop so that the machine's load hits
// all alike. Every contender runs on one pool, opened through the dialect's connector
// (postgres.OpenDB, mysql.OpenDB; SQL Server has none), whose transactions without an
// inbox record are the driver's own. It reports each one's time per transaction and
// the ratios over the baseline (fused-x, inbox-x for the separate wiring, duplicate-x,
// roundtrip-x).
//
// The "filled" variants first fill the inbox with OUTBOX_BENCH_INBOX_ENTRIES entries
// (default 1,000,000; 10,000,000 under OUTBOX_TEST_FULL=1): recording must cost the same
// as over an empty table.
func BenchmarkHandlerTx(b *testing.B) {
	for _, d := range inboxtest.Dialects {
		b.Run(d.Name, func(b *testing.B) { benchHandlerTx(b, d, 0) })
		b.Run(d.Name+"/filled", func(b *testing.B) { benchHandlerTx(b, d, filledEntries()) })
	}
}

func filledEntries() int {
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_INBOX_ENTRIES")); err == nil && v > 0 {
		return v
	}
	if full() {
		return 10_000_000
	}
	return 1_000_000
}

func benchHandlerTx(b *testing.B, d *inboxtest.Dialect, filled int) {
	if d.Name == testenv.SQLServer && filled > 0 {
		b.Skip("no fill statement for SQL Server")
	}
	e := inboxtest.NewEnvWired(b, d, inboxtest.Fused)
	if filled > 0 {
		fillInbox(b, e, filled)
	}
	in := e.NewInbox(b, inbox.Config{})
	h := handler(e, nil)
	inner := func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) }
	baseline := e.Out.Middleware()(inner)
	fused := in.OutboxMiddleware(e.Out)(inner)
	withInbox := e.Out.Middleware()(in.Middleware()(inner))
	oneMore := e.Out.Middleware()(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := publisher.SQLTxFromContext(msg.Context())
		var one int
		if err := tx.QueryRowContext(msg.Context(), "SELECT 1").Scan(&one); err != nil {
			return nil, err
		}
		return nil, h(msg)
	})
	if err := deliver(fused, "dup"); err != nil {
		b.Fatal(err)
	}
	run := func(hf message.HandlerFunc, uuid string) time.Duration {
		t0 := time.Now()
		if err := deliver(hf, uuid); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var base, rec, fus, dup, rt time.Duration
	i := 0
	for b.Loop() {
		id := watermill.NewUUID()
		// Rotate the order so that none always runs after another.
		steps := []func(){
			func() { base += run(baseline, id) },
			func() { rec += run(withInbox, id) },
			func() { fus += run(fused, id+"-f") },
			func() { dup += run(fused, "dup") },
			func() { rt += run(oneMore, id+"-rt") },
		}
		for k := range steps {
			steps[(i+k)%len(steps)]()
		}
		i++
	}
	n := float64(i)
	b.ReportMetric(float64(base.Nanoseconds())/n, "baseline-ns/tx")
	b.ReportMetric(float64(rec.Nanoseconds())/n, "inbox-ns/tx")
	b.ReportMetric(float64(fus.Nanoseconds())/n, "fused-ns/tx")
	b.ReportMetric(float64(fus)/float64(base), "fused-x")
	b.ReportMetric(float64(dup.Nanoseconds())/n, "duplicate-ns/tx")
	b.ReportMetric(float64(rec)/float64(base), "inbox-x")
	b.ReportMetric(float64(dup)/float64(base), "duplicate-x")
	b.ReportMetric(float64(rt)/float64(base), "roundtrip-x")
}

// fillInbox inserts n entries of other consumers with one statement, in key order (the
// fastest way to build a big table: random keys made MariaDB with a 128 MiB buffer pool
// crawl for over 20 minutes at 10,000,000). The measured inserts use random UUIDs, so
// they land on random leaf pages of the filled key all the same.
func fillInbox(tb testing.TB, e *inboxtest.Env, n int) {
	tb.Helper()
	table := e.D.Table(e.Opts, e.Opts.InboxTable())
	var q string
	switch e.D.Name {
	case testenv.Postgres:
		q = fmt.Sprintf(`INSERT INTO %s (consumer, message_uuid, processed_at)
			SELECT 'other-' || (g %% 10), lpad(g::text, 12, '0'), now() - (g %% 864000) * interval '1 second' FROM generate_series(1, %d) AS g`, table, n)
	default:
		digits := "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
			"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
		var from, num []string
		for i, p := 0, 1; p < n; i, p = i+1, p*10 {
			from = append(from, fmt.Sprintf("%s d%d", digits, i))
			num = append(num, fmt.Sprintf("d%d.d*%d", i, p))
		}
		x := strings.Join(num, "+")
		q = fmt.Sprintf("INSERT INTO %s (consumer, message_uuid, processed_at) SELECT CONCAT('other-', (%[2]s) %% 10), LPAD(%[2]s, 12, '0'), "+
			"TIMESTAMPADD(SECOND, -((%[2]s) %% 864000), UTC_TIMESTAMP(6)) FROM %[3]s WHERE %[2]s < %[4]d",
			table, x, strings.Join(from, " CROSS JOIN "), n)
	}
	start := time.Now()
	if _, err := e.DB.ExecContext(context.Background(), q); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("filled the inbox with %d entries in %s", n, time.Since(start).Round(time.Second))
}
