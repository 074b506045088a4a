package outboxtest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// Bench runs the store benchmarks against the dialect h describes:
//
//	Read1, Read64                   Read of 1 and 64 eligible rows (256-byte bodies)
//	InsertCommit/1, /64, /1000      BEGIN, Store.Insert of N rows, COMMIT
//	InsertCommitBaseline/1, ...     the same transaction with a hand-written multi-row
//	                                INSERT of the same kind of rows
//	ClaimComplete100                Claim of 100 unordered rows, then Complete
//
// InsertCommit/N also runs the baseline transaction once per iteration, off the clock,
// and reports the median ratio of the store's time to the baseline's as "x-baseline":
// both are measured side by side in the same run, so load on the machine affects both
// alike. Tables are kept the same size throughout (rows inserted are deleted off the
// clock), so the off-clock work makes a run take several times -benchtime.
func Bench(b *testing.B, h Harness) {
	h.require(b)
	readEnv := benchEnv(b, h)
	readEnv.fill(b, 1000)
	insertEnv := benchEnv(b, h)
	claimEnv := benchEnv(b, h)
	claimEnv.fill(b, 10_000)

	b.Run("Read1", func(b *testing.B) { benchRead(b, readEnv, 1) })
	b.Run("Read64", func(b *testing.B) { benchRead(b, readEnv, 64) })
	b.Run("InsertCommit", func(b *testing.B) {
		for _, n := range []int{1, 64, 1000} {
			b.Run(strconv.Itoa(n), func(b *testing.B) { benchInsertCommit(b, insertEnv, n, true) })
		}
	})
	b.Run("InsertCommitBaseline", func(b *testing.B) {
		for _, n := range []int{1, 64, 1000} {
			b.Run(strconv.Itoa(n), func(b *testing.B) { benchInsertCommit(b, insertEnv, n, false) })
		}
	})
	b.Run("ClaimComplete100", func(b *testing.B) { benchClaimComplete(b, claimEnv, 100) })
}

// benchEnv makes tables for the benchmarks, dropped when Bench ends. Helpers called on
// sub-benchmarks use a copy bound to the sub-benchmark.
func benchEnv(b *testing.B, h Harness) *env {
	b.Helper()
	return newEnvWith(b, h, outbox.Options{TablePrefix: testenv.Prefix(b), Lanes: outbox.LanesDefault})
}

func (e *env) on(b *testing.B) *env {
	c := *e
	c.t = b
	c.ctx = context.Background()
	return &c
}

var (
	benchBody    = []byte(strings.Repeat("b", 256))
	benchHeaders = headercodec.Encode(nil, []headercodec.Header{
		{Name: "_watermill_message_uuid", Value: []byte("01J0XQ5V3Z8Y6W4T2R0P9N7M5K")},
		{Name: "correlation_id", Value: []byte("c0ffee00-0000-4000-8000-000000000000")},
	})
)

// benchRecords refills recs with n fresh rows like an application's: every other row
// carries an ordering key, all share one 256-byte body and two headers.
func benchRecords(recs []outbox.Record, n int, now time.Time) []outbox.Record {
	recs = recs[:0]
	for i := 0; i < n; i++ {
		id := outbox.NewID()
		r := outbox.Record{
			ID:          id,
			MessageUUID: "uuid-" + strconv.Itoa(i),
			Lane:        outbox.Unordered,
			Destination: "bench.topic",
			MessageType: "bench.Event",
			Headers:     benchHeaders,
			Body:        benchBody,
			CreatedAt:   now,
		}
		if i%2 == 1 {
			r.OrderingKey = "key-" + strconv.Itoa(i%64)
			r.Lane = lanes.Of(r.OrderingKey, outbox.LanesDefault)
		}
		recs = append(recs, r)
	}
	return recs
}

// fill inserts n unordered rows due at BaseTime.
func (e *env) fill(b *testing.B, n int) {
	b.Helper()
	recs := benchRecords(nil, n, at(0))
	for i := range recs {
		recs[i].Lane, recs[i].OrderingKey = outbox.Unordered, ""
	}
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), 2000)]
		e.insert(chunk...)
		recs = recs[len(chunk):]
	}
}

func benchRead(b *testing.B, e *env, n int) {
	e = e.on(b)
	dst := make([]outbox.Record, n)
	q := outbox.ReadQuery{Lane: outbox.Unordered, Now: at(time.Hour)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := e.store.Read(e.ctx, q, dst)
		if err != nil || len(got) != n {
			b.Fatalf("Read = %d rows, %v; want %d", len(got), err, n)
		}
	}
}

// benchInsertCommit measures one insert-at-commit transaction of n rows per iteration,
// through the store or (store false) through the hand-written baseline. With store, each
// iteration also runs the baseline's transaction off the clock (before or after the
// store's, alternately) and x-baseline reports the median of the per-iteration ratios:
// pairs run back to back see the same machine load, and the median ignores the pairs a
// load spike hit.
func benchInsertCommit(b *testing.B, e *env, n int, store bool) {
	e = e.on(b)
	base := newBaseline(e)
	var recs []outbox.Record
	ratios := make([]float64, 0, b.N)
	runBaseline := func() time.Duration {
		e.clear()
		recs = benchRecords(recs, n, at(0))
		start := time.Now()
		base.commit(recs)
		return time.Since(start)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if !store {
			e.clear()
			recs = benchRecords(recs, n, at(0))
			b.StartTimer()
			base.commit(recs)
			continue
		}
		var baseTime time.Duration
		if i%2 == 0 {
			baseTime = runBaseline()
		}
		e.clear()
		recs = benchRecords(recs, n, at(0))
		b.StartTimer()
		start := time.Now()
		e.storeCommit(recs)
		storeTime := time.Since(start)
		b.StopTimer()
		if i%2 == 1 {
			baseTime = runBaseline()
		}
		ratios = append(ratios, float64(storeTime)/float64(baseTime))
		b.StartTimer()
	}
	b.StopTimer()
	e.clear()
	if len(ratios) > 0 {
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "x-baseline")
	}
}

func (e *env) storeCommit(recs []outbox.Record) {
	tx, err := e.h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Insert(e.ctx, tx, recs); err != nil {
		_ = tx.Rollback()
		e.t.Fatalf("Insert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
}

// clear deletes every outbox row (off the clock), keeping the table's size stable.
func (e *env) clear() {
	e.exec("DELETE FROM " + e.outboxTable())
}

// baselineColumns are the columns a hand-written outbox INSERT sets; the others keep
// their defaults (no claim, no error).
var baselineColumns = []string{
	"id", "message_uuid", "lane", "ordering_key", "transport", "destination", "message_type",
	"headers", "body", "tenant_id", "created_at", "deliver_at", "attempts", "status",
}

// baseline is what an application would write by hand instead of the store: one
// multi-row INSERT per chunk of rows (under the harness's parameter limit), with SQL
// texts built once per chunk size.
type baseline struct {
	e       *env
	perStmt int
	texts   map[int]string
	args    []any
}

func newBaseline(e *env) *baseline {
	// SQL Server takes at most 1000 rows in one VALUES list.
	perStmt := min(1000, max(1, e.h.maxParams()/len(baselineColumns)))
	return &baseline{e: e, perStmt: perStmt, texts: map[int]string{}}
}

func (bl *baseline) text(rows int) string {
	if s, ok := bl.texts[rows]; ok {
		return s
	}
	var sb strings.Builder
	sb.WriteString("INSERT INTO " + bl.e.outboxTable() + " (" + strings.Join(baselineColumns, ", ") + ") VALUES ")
	p := 1
	for r := 0; r < rows; r++ {
		if r > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('(')
		for c := range baselineColumns {
			if c > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(bl.e.h.Placeholder(p))
			p++
		}
		sb.WriteByte(')')
	}
	bl.texts[rows] = sb.String()
	return bl.texts[rows]
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (bl *baseline) commit(recs []outbox.Record) {
	e := bl.e
	tx, err := e.h.DB.BeginTx(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), bl.perStmt)]
		recs = recs[len(chunk):]
		args := bl.args[:0]
		for i := range chunk {
			r := &chunk[i]
			var lane any
			if r.Lane != outbox.Unordered {
				lane = int64(r.Lane)
			}
			deliver := r.DeliverAt
			if deliver.IsZero() {
				deliver = r.CreatedAt
			}
			args = append(args, r.ID[:], r.MessageUUID, lane, nullable(r.OrderingKey), r.Transport, r.Destination,
				nullable(r.MessageType), r.Headers, r.Body, nullable(r.TenantID), r.CreatedAt.UTC(), deliver.UTC(),
				int64(0), string(outbox.StatusPending))
		}
		bl.args = args
		if _, err := tx.ExecContext(e.ctx, bl.text(len(chunk)), args...); err != nil {
			_ = tx.Rollback()
			e.t.Fatalf("baseline INSERT of %d rows: %v", len(chunk), err)
		}
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("baseline commit: %v", err)
	}
}

// benchClaimComplete measures one claim of batch unordered rows and their completion;
// the rows it deletes are replaced off the clock.
func benchClaimComplete(b *testing.B, e *env, batch int) {
	e = e.on(b)
	now, until := at(time.Hour), at(2*time.Hour)
	var dst, refill []outbox.Record
	ids := make([]outbox.ID, 0, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok := outbox.NewToken()
		var err error
		dst, err = e.store.Claim(e.ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: batch, Now: now, Until: until, Token: tok}, dst)
		if err != nil || len(dst) != batch {
			b.Fatalf("Claim = %d rows, %v; want %d", len(dst), err, batch)
		}
		ids = ids[:0]
		for j := range dst {
			ids = append(ids, dst[j].ID)
		}
		n, err := e.store.Complete(e.ctx, outbox.CompleteParams{Token: tok, IDs: ids, Now: now, Lane: outbox.Unordered})
		if err != nil || n != batch {
			b.Fatalf("Complete = %d, %v; want %d", n, err, batch)
		}
		b.StopTimer()
		refill = benchRecords(refill, batch, at(0))
		for j := range refill {
			refill[j].Lane, refill[j].OrderingKey = outbox.Unordered, ""
		}
		e.insert(refill...)
		b.StartTimer()
	}
}
