package forwarder_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/pubbench"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Benchmarks print their figures with b.ReportMetric, measured side by side in one run
// (forwarder and baseline on the same database, one after the other, each on a fresh
// table). Run them with -benchtime=1x: every iteration drains a whole backlog, so ns/op
// is not the figure to read.
//
//	go test ./forwarder/ -run '^$' -bench . -benchtime=1x
//
// OUTBOX_BENCH_ROWS overrides the backlog size (default 100,000); OUTBOX_BENCH_1M=1 adds
// the 1,000,000-row memory run.

func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// fillUnordered inserts n unordered rows (200-byte payload, three metadata entries)
// directly through the store in transactions of 5,000.
func fillUnordered(tb testing.TB, e chaos.Engine, db *sql.DB, store outbox.Store, n int, destination string) {
	fillKeyed(tb, e, db, store, n, 0, destination)
}

// fillKeyed fills store with n rows over keys ordering keys (0: unordered rows).
func fillKeyed(tb testing.TB, e chaos.Engine, db *sql.DB, store outbox.Store, n, keys int, destination string) {
	tb.Helper()
	lanesN := store.Options().WithDefaults().Lanes
	ctx := context.Background()
	md := message.Metadata{"trace_id": "0123456789abcdef", "type": "order.created", "v": "1"}
	headers := headercodec.EncodeMetadata(nil, md)
	body := []byte(strings.Repeat("x", 200))
	now := time.Now().UTC()
	const chunk = 5000
	recs := make([]outbox.Record, 0, chunk)
	for done := 0; done < n; {
		recs = recs[:0]
		for i := 0; i < chunk && done+i < n; i++ {
			r := outbox.Record{
				ID: outbox.NewID(), MessageUUID: watermill.NewUUID(), Lane: outbox.Unordered,
				Destination: destination, Headers: headers, Body: body, CreatedAt: now,
			}
			if keys > 0 {
				r.OrderingKey = "key-" + strconv.Itoa((done+i)%keys)
				r.Lane = lanes.Of(r.OrderingKey, lanesN)
			}
			recs = append(recs, r)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			tb.Fatal(err)
		}
		if err := store.Insert(ctx, tx, recs); err != nil {
			_ = tx.Rollback()
			tb.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			tb.Fatal(err)
		}
		done += len(recs)
	}
	// Fresh statistics, as autovacuum/InnoDB would have them in production: without them
	// PostgreSQL plans the claims as a sort of the whole backlog (autovacuum is off on
	// some test servers).
	o := store.Options()
	analyze := "ANALYZE " + e.Qualify(o, o.OutboxTable())
	if e.Driver == "mysql" {
		analyze = "ANALYZE TABLE " + e.Qualify(o, o.OutboxTable())
	}
	if _, err := db.ExecContext(ctx, analyze); err != nil {
		tb.Fatalf("analyze: %v", err)
	}
}

// baselineDrain is the hand-written loop the forwarder is measured against: 4 workers,
// each claiming a batch of 500 eligible unordered rows with FOR UPDATE SKIP LOCKED
// (reading what a forwarder reads), handing them to the same no-op publisher, and
// deleting them in one statement, one transaction per batch. It returns rows/s.
func baselineDrain(tb testing.TB, e chaos.Engine, db *sql.DB, opts outbox.Options, pub message.Publisher, n int) float64 {
	return baselineLoop(tb, e, db, opts, pub, n, 4, 1)
}

// baselineLoop is baselineDrain with `workers` claimers, each publishing a batch's
// messages through up to `fanout` goroutines at once before its delete (fanout 1: one
// after another). With a real broker and a fanout as wide as the forwarder's window it
// is the database-backed ceiling: no router, no claim UPDATE, nothing but the loop.
func baselineLoop(tb testing.TB, e chaos.Engine, db *sql.DB, opts outbox.Options, pub message.Publisher, n, workers, fanout int) float64 {
	tb.Helper()
	table := e.Qualify(opts, opts.OutboxTable())
	ph := func(i int) string {
		if e.Driver == "pgx" {
			return "$" + strconv.Itoa(i)
		}
		return "?"
	}
	// Unordered rows: lane NULL, or -1 where the lane leads the primary key (MySQL);
	// the delete names the lane there too, so that it reads its rows by key.
	unordered, delWhere := "lane IS NULL", "id IN ("
	if e.Driver == "mysql" {
		unordered, delWhere = "lane = -1 AND seq = -1", "lane = -1 AND seq = -1 AND id IN ("
	}
	sel := fmt.Sprintf(`SELECT id, message_uuid, destination, headers, body FROM %s
WHERE status = 'pending' AND %s AND deliver_at <= %s AND (claim_expires_at IS NULL OR claim_expires_at <= %s)
ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`, table, unordered, ph(1), ph(2))
	var deleted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]any, 0, 500)
			batch := make([]*message.Message, 0, 500)
			var dest string
			for {
				err := func() error {
					ctx := context.Background()
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					now := time.Now().UTC()
					rows, err := tx.QueryContext(ctx, sel, now, now)
					if err != nil {
						return err
					}
					ids, batch = ids[:0], batch[:0]
					for rows.Next() {
						var id, headers, body []byte
						var uuid string
						if err := rows.Scan(&id, &uuid, &dest, &headers, &body); err != nil {
							rows.Close()
							return err
						}
						md, err := headercodec.DecodeMetadata(headers)
						if err != nil {
							rows.Close()
							return err
						}
						m := message.NewMessage(uuid, body)
						m.Metadata = md
						if fanout > 1 {
							batch = append(batch, m) // every row has the same destination
						} else if err := pub.Publish(dest, m); err != nil {
							rows.Close()
							return err
						}
						ids = append(ids, id)
					}
					if err := rows.Close(); err != nil {
						return err
					}
					if len(ids) == 0 {
						return errEmpty
					}
					if err := pubbench.Concurrently(pub, dest, batch, fanout); err != nil {
						return err
					}
					var b strings.Builder
					fmt.Fprintf(&b, "DELETE FROM %s WHERE %s", table, delWhere)
					for i := range ids {
						if i > 0 {
							b.WriteByte(',')
						}
						b.WriteString(ph(i + 1))
					}
					b.WriteByte(')')
					if _, err := tx.ExecContext(ctx, b.String(), ids...); err != nil {
						return err
					}
					if err := tx.Commit(); err != nil {
						return err
					}
					deleted.Add(int64(len(ids)))
					return nil
				}()
				if err == errEmpty {
					if deleted.Load() >= int64(n) {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					// Deadlocks happen with SKIP LOCKED + DELETE on MariaDB: retry.
					if strings.Contains(err.Error(), "1213") || strings.Contains(err.Error(), "40P01") {
						continue
					}
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("baseline: %v", err)
	}
	return float64(n) / time.Since(start).Seconds()
}

var errEmpty = fmt.Errorf("empty batch")

// drainResult is what one forwarder drain measured.
type drainResult struct {
	rate         float64 // rows/s until the table is empty
	allocsPerMsg float64
	bytesPerMsg  float64
	peakHeap     uint64 // bytes, sampled every 10 ms
	peakRSS      uint64 // bytes (VmHWM is process-wide; this is sampled VmRSS)
	startHeap    uint64
}

// forwarderDrain runs a forwarder over a full table until it is empty.
func forwarderDrain(tb testing.TB, e chaos.Engine, db *sql.DB, store outbox.Store, cfg forwarder.Config, pub message.Publisher, count func() int64, n int) drainResult {
	tb.Helper()
	return forwarderDrainVia(tb, e, db, store, cfg, pub, count, n, chaos.RunForwarder)
}

// forwarderDrainVia is forwarderDrain with the forwarder run by run (Forwarder.Run, or
// a Watermill router: runInRouter).
func forwarderDrainVia(tb testing.TB, e chaos.Engine, db *sql.DB, store outbox.Store, cfg forwarder.Config, pub message.Publisher, count func() int64, n int,
	run func(testing.TB, *forwarder.Forwarder) func()) drainResult {
	tb.Helper()
	return drainMeasured(tb, e, db, store, cfg, pub, count, n, run, false)
}

// forwarderDrainSampled is forwarderDrain that also samples the peak heap and RSS every
// 10 ms (drainResult.peakHeap, peakRSS). Only the memory benchmark asks for it: the
// sampling (a stop-the-world ReadMemStats and a read of /proc per tick) costs the
// process about 0.7 µs per forwarded message at 27k rows/s, Go CPU that the raw loop
// it is compared with does not spend.
func forwarderDrainSampled(tb testing.TB, e chaos.Engine, db *sql.DB, store outbox.Store, cfg forwarder.Config, pub message.Publisher, count func() int64, n int) drainResult {
	tb.Helper()
	return drainMeasured(tb, e, db, store, cfg, pub, count, n, chaos.RunForwarder, true)
}

// drainMeasured runs the forwarder until the table is empty and measures the drain.
func drainMeasured(tb testing.TB, e chaos.Engine, db *sql.DB, store outbox.Store, cfg forwarder.Config, pub message.Publisher, count func() int64, n int,
	run func(testing.TB, *forwarder.Forwarder) func(), sample bool) drainResult {
	tb.Helper()
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	res := drainResult{startHeap: ms0.HeapInuse}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if !sample {
			return
		}
		var ms runtime.MemStats
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			res.peakHeap = max(res.peakHeap, ms.HeapInuse)
			res.peakRSS = max(res.peakRSS, rss())
		}
	}()
	timed := newTimedStore(store)
	var wrapped outbox.Store = timed
	if bl, ok := store.(outbox.BatchLocker); ok && !cfg.TokenClaims {
		wrapped = lockingTimedStore{timedStore: timed, bl: bl}
	}
	fwd, err := forwarder.New(wrapped, forwarder.Targets{"": pub}, cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	stop := run(tb, fwd)
	for count() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	for e.RowCount(tb, db, store.Options()) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	close(stopSampling)
	<-sampled
	stop()
	res.rate = float64(n) / elapsed.Seconds()
	tb.Logf("%s: %d rows in %s (%.0f rows/s); store calls:\n%s", e.Name, n, elapsed.Round(time.Millisecond), res.rate, timed)
	res.allocsPerMsg = float64(ms1.Mallocs-ms0.Mallocs) / float64(n)
	res.bytesPerMsg = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(n)
	return res
}

// cpuSample is what measureCPU saw per message.
type cpuSample struct{ ns, allocs, bytes float64 }

// measureCPU runs run, which forwards n messages, and returns this process's CPU time
// (user + system: the database server's work is not in it), allocations and bytes
// allocated per message. The garbage of what came before (a fill of the table) is
// collected and returned to the OS first, so that no contender pays for it.
func measureCPU(n int, run func()) cpuSample {
	debug.FreeOSMemory()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := processCPU()
	run()
	cpu := processCPU() - c0
	runtime.ReadMemStats(&m1)
	return cpuSample{
		ns:     float64(cpu.Nanoseconds()) / float64(n),
		allocs: float64(m1.Mallocs-m0.Mallocs) / float64(n),
		bytes:  float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n),
	}
}

// rss returns the process's resident set size from /proc (0 where unavailable).
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkDrain: a backlog of unordered rows drained into a no-op publisher by the
// forwarder (TokenClaims with its defaults, 250/1000, and with a larger claim/in-flight
// window, 500/2000; the default row locks with their defaults, 1000/4000, and with
// 250/1000) against the hand-written SKIP LOCKED claim + batch delete loop on the same
// database. Reports rows/s of each, their ratios (goal >= 0.8), allocations and bytes
// per forwarded message (of TokenClaims: fwd_rows/s keeps measuring token claims, as
// before they stopped being the default), and the Go CPU per message of the loop and of
// the row locks (this process only: the database server's work is not in it; measureCPU)
// with the median of the per-round ratios (ratio_cpu_locked, goal <= 1.5) and both
// sides' allocations per message. Every
// forwarder runs through Forwarder.Run, which needs no router; the default Config runs
// once more as a handler of a Watermill router (AddToRouter), which measures what the
// router costs side by side (fwdlocked_router_rows/s, ratio_locked_router).
func BenchmarkDrain(b *testing.B) {
	n := benchRows()
	for _, e := range chaos.Engines {
		b.Run(e.Name, func(b *testing.B) {
			db, _ := e.Open(b)
			var base, def, big, locked, locked500, ratio, ratio500, ratioLocked, ratioLocked500, allocs, bytes []float64
			var baseCPU, lockedCPU, routerCPU, ratioCPU []float64 // Go CPU ns per message
			var viaRouter, ratioRouter []float64
			var baseAllocs, lockedAllocs, lockedBytes []float64
			for i := 0; i < b.N; i++ {
				for r := 0; r < benchRounds(); r++ {
					fresh := func() (*chaos.NopPublisher, outbox.Store) {
						st := e.Table(b, db, 64)
						fillUnordered(b, e, db, st, n, "bench")
						return &chaos.NopPublisher{}, st
					}
					// Alternate who goes first so that drifting machine load does not
					// favour one side.
					runs := []func(){
						func() {
							nop, st := fresh()
							m := measureCPU(n, func() {
								base = append(base, baselineDrain(b, e, db, st.Options(), nop, n))
							})
							baseCPU, baseAllocs = append(baseCPU, m.ns), append(baseAllocs, m.allocs)
							quiesce(b, e, db, st.Options())
						},
						func() {
							nop, st := fresh()
							d := forwarderDrain(b, e, db, st, forwarder.Config{TokenClaims: true}, nop, nop.Count, n)
							quiesce(b, e, db, st.Options())
							def = append(def, d.rate)
							allocs = append(allocs, d.allocsPerMsg)
							bytes = append(bytes, d.bytesPerMsg)
						},
						func() {
							nop, st := fresh()
							big = append(big, forwarderDrain(b, e, db, st, forwarder.Config{TokenClaims: true, ClaimBatch: 500, InFlight: 2000}, nop, nop.Count, n).rate)
							quiesce(b, e, db, st.Options())
						},
						func() {
							nop, st := fresh()
							m := measureCPU(n, func() {
								locked = append(locked, forwarderDrain(b, e, db, st, forwarder.Config{}, nop, nop.Count, n).rate)
							})
							lockedCPU, lockedAllocs, lockedBytes = append(lockedCPU, m.ns), append(lockedAllocs, m.allocs), append(lockedBytes, m.bytes)
							quiesce(b, e, db, st.Options())
						},
						func() {
							nop, st := fresh()
							routerCPU = append(routerCPU, measureCPU(n, func() {
								viaRouter = append(viaRouter, forwarderDrainVia(b, e, db, st, forwarder.Config{}, nop, nop.Count, n, runInRouter).rate)
							}).ns)
							quiesce(b, e, db, st.Options())
						},
						func() {
							nop, st := fresh()
							cfg := forwarder.Config{ClaimBatch: forwarder.TokenClaimBatchDefault, InFlight: forwarder.TokenInFlightDefault}
							locked500 = append(locked500, forwarderDrain(b, e, db, st, cfg, nop, nop.Count, n).rate)
							quiesce(b, e, db, st.Options())
						},
					}
					if r%2 == 1 {
						slices.Reverse(runs)
					}
					for _, run := range runs {
						run()
					}
					ratio = append(ratio, def[len(def)-1]/base[len(base)-1])
					ratio500 = append(ratio500, big[len(big)-1]/base[len(base)-1])
					ratioLocked = append(ratioLocked, locked[len(locked)-1]/base[len(base)-1])
					ratioLocked500 = append(ratioLocked500, locked500[len(locked500)-1]/base[len(base)-1])
					ratioRouter = append(ratioRouter, viaRouter[len(viaRouter)-1]/base[len(base)-1])
					ratioCPU = append(ratioCPU, lockedCPU[len(lockedCPU)-1]/baseCPU[len(baseCPU)-1])
				}
			}
			b.ReportMetric(median(base), "baseline_rows/s")
			b.ReportMetric(median(def), "fwd_rows/s")
			b.ReportMetric(median(ratio), "ratio")
			b.ReportMetric(median(big), "fwd500_rows/s")
			b.ReportMetric(median(ratio500), "ratio500")
			b.ReportMetric(median(locked), "fwdlocked_rows/s")
			b.ReportMetric(median(ratioLocked), "ratio_locked")
			b.ReportMetric(median(locked500), "fwdlocked250_rows/s")
			b.ReportMetric(median(ratioLocked500), "ratio_locked250")
			b.ReportMetric(median(baseCPU), "baseline_cpu_ns/msg")
			b.ReportMetric(median(lockedCPU), "fwdlocked_cpu_ns/msg")
			b.ReportMetric(median(ratioCPU), "ratio_cpu_locked")
			b.ReportMetric(median(baseAllocs), "baseline_allocs/msg")
			b.ReportMetric(median(lockedAllocs), "fwdlocked_allocs/msg")
			b.ReportMetric(median(lockedBytes), "fwdlocked_B/msg")
			b.ReportMetric(median(viaRouter), "fwdlocked_router_rows/s")
			b.ReportMetric(median(ratioRouter), "ratio_locked_router")
			b.ReportMetric(median(routerCPU), "fwdlocked_router_cpu_ns/msg")
			b.ReportMetric(median(allocs), "allocs/msg")
			b.ReportMetric(median(bytes), "B/msg")
			b.ReportMetric(0, "ns/op")
			b.Logf("%s: per round: baseline %v, forwarder TokenClaims (250/1000) %v, TokenClaims 500/2000 %v, forwarder default row locks (1000/4000) %v, row locks 250/1000 %v rows/s",
				e.Name, rounded(base), rounded(def), rounded(big), rounded(locked), rounded(locked500))
			b.Logf("%s: Go CPU per message, per round: baseline %v, row locks %v ns; ratios %v",
				e.Name, rounded(baseCPU), rounded(lockedCPU), twoDecimals(ratioCPU))
		})
	}
}

// BenchmarkDrainOrdered: a backlog of ordered rows (64 lanes, 1,000 keys) drained into a
// no-op publisher by the forwarder with the default Config through Run, against the
// hand-written SKIP LOCKED claim + batch delete loop over as many unordered rows on the
// same database (the "raw loop"), and against itself with KeysInFlight 1 (a
// lane run sent in strict id order, one Publish call at a time: what the keys in
// flight cost a target that takes no time). Reports the rates, the ratios, the Go CPU
// per message of each (this process only) and the allocations per forwarded message.
// OUTBOX_BENCH_LANE_BATCH, OUTBOX_BENCH_LANE_STATEMENTS and OUTBOX_BENCH_KEYS_IN_FLIGHT
// override the three lane settings, to size them by measurement (KeysInFlight 1 is the
// strict id order of a whole lane run).
func BenchmarkDrainOrdered(b *testing.B) {
	n := benchRows()
	cfg := forwarder.Config{}
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_LANE_BATCH")); err == nil {
		cfg.LaneBatch = v
	}
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_LANE_STATEMENTS")); err == nil {
		cfg.LaneStatements = v
	}
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_KEYS_IN_FLIGHT")); err == nil {
		cfg.KeysInFlight = v
	}
	for _, e := range chaos.Engines {
		b.Run(e.Name, func(b *testing.B) {
			db, _ := e.Open(b)
			var base, ours, strict, ratio, baseCPU, oursCPU, strictCPU, allocs []float64
			strictCfg := cfg
			strictCfg.KeysInFlight = 1
			cpuPerMsg := func(run func()) float64 { return measureCPU(n, run).ns }
			for i := 0; i < b.N; i++ {
				for r := 0; r < benchRounds(); r++ {
					runs := []func(){
						func() {
							st := e.Table(b, db, 64)
							fillUnordered(b, e, db, st, n, "bench")
							nop := &chaos.NopPublisher{}
							baseCPU = append(baseCPU, cpuPerMsg(func() {
								base = append(base, baselineDrain(b, e, db, st.Options(), nop, n))
							}))
							quiesce(b, e, db, st.Options())
						},
						func() {
							st := e.Table(b, db, 64)
							fillKeyed(b, e, db, st, n, 1000, "bench")
							nop := &chaos.NopPublisher{}
							oursCPU = append(oursCPU, cpuPerMsg(func() {
								d := forwarderDrain(b, e, db, st, cfg, nop, nop.Count, n)
								ours = append(ours, d.rate)
								allocs = append(allocs, d.allocsPerMsg)
							}))
							quiesce(b, e, db, st.Options())
						},
						func() {
							st := e.Table(b, db, 64)
							fillKeyed(b, e, db, st, n, 1000, "bench")
							nop := &chaos.NopPublisher{}
							strictCPU = append(strictCPU, cpuPerMsg(func() {
								strict = append(strict, forwarderDrain(b, e, db, st, strictCfg, nop, nop.Count, n).rate)
							}))
							quiesce(b, e, db, st.Options())
						},
					}
					// Rotate the order so that none always runs after another.
					for k := range runs {
						runs[(r+k)%len(runs)]()
					}
					ratio = append(ratio, ours[len(ours)-1]/base[len(base)-1])
				}
			}
			b.ReportMetric(median(base), "baseline_rows/s")
			b.ReportMetric(median(ours), "ordered_rows/s")
			b.ReportMetric(median(ratio), "ratio")
			b.ReportMetric(median(baseCPU), "baseline_cpu_ns/msg")
			b.ReportMetric(median(oursCPU), "ordered_cpu_ns/msg")
			b.ReportMetric(median(oursCPU)/median(baseCPU), "cpu_ratio")
			b.ReportMetric(median(strict), "strict_rows/s")
			b.ReportMetric(median(strictCPU), "strict_cpu_ns/msg")
			b.ReportMetric(median(oursCPU)/median(strictCPU), "cpu_vs_strict")
			b.ReportMetric(median(allocs), "allocs/msg")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchRounds is how many times each side is measured (OUTBOX_BENCH_ROUNDS, default 1);
// the reported figures are medians of the rounds, ratios are per round.
func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// BenchmarkBacklogMemory: memory while draining a large backlog must stay flat (the
// forwarder streams in batches): peak heap in use and RSS for a 20,000-row and a
// benchRows()-row backlog (and 1,000,000 rows with OUTBOX_BENCH_1M=1).
func BenchmarkBacklogMemory(b *testing.B) {
	sizes := []int{20_000, benchRows()}
	if os.Getenv("OUTBOX_BENCH_1M") == "1" {
		sizes = append(sizes, 1_000_000)
	}
	for _, e := range chaos.Engines {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/rows=%d", e.Name, n), func(b *testing.B) {
				db, _ := e.Open(b)
				var r drainResult
				for i := 0; i < b.N; i++ {
					nop := &chaos.NopPublisher{}
					st := e.Table(b, db, 64)
					fillUnordered(b, e, db, st, n, "bench")
					r = forwarderDrainSampled(b, e, db, st, forwarder.Config{TokenClaims: true}, nop, nop.Count, n)
				}
				b.ReportMetric(float64(r.startHeap)/(1<<20), "start_heap_MB")
				b.ReportMetric(float64(r.peakHeap)/(1<<20), "peak_heap_MB")
				b.ReportMetric(float64(r.peakRSS)/(1<<20), "peak_rss_MB")
				b.ReportMetric(r.rate, "rows/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// arrivalPublisher notes when each message arrives.
type arrivalPublisher struct {
	ch chan time.Time
}

func (p *arrivalPublisher) Publish(_ string, msgs ...*message.Message) error {
	for range msgs {
		p.ch <- time.Now()
	}
	return nil
}
func (p *arrivalPublisher) Close() error { return nil }

// BenchmarkCommitToPublish: latency from the start of Commit of a one-message outbox
// transaction to the target's Publish call, with the publisher linked to the forwarder
// (direct dispatch through Notify), one transaction at a time. Goal: p50 <= 5 ms,
// p99 <= 20 ms on loopback. commit_p50 is the Commit call alone, for reference.
func BenchmarkCommitToPublish(b *testing.B) {
	for _, e := range chaos.Engines {
		for _, keyed := range []bool{false, true} {
			name := e.Name + "/unordered"
			if keyed {
				name = e.Name + "/keyed"
			}
			b.Run(name, func(b *testing.B) {
				db, _ := e.Open(b)
				st := e.Table(b, db, 64)
				target := &arrivalPublisher{ch: make(chan time.Time, 16)}
				// A long poll interval makes sure the figure is the notify path, not polling.
				fwd := chaos.NewForwarder(b, st, forwarder.Targets{"": target}, forwarder.Config{
					PollInterval: time.Second, MaxPollInterval: 2 * time.Second,
				})
				chaos.RunForwarder(b, fwd)
				ob, err := publisher.New(st, publisher.Config{Notifier: fwd}, nil)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if keyed {
					waitAnyLease(b, st, 10*time.Second)
				}
				samples := max(b.N, 500)
				lat := make([]time.Duration, 0, samples)
				commits := make([]time.Duration, 0, samples)
				b.ResetTimer()
				for i := 0; i < samples; i++ {
					m := message.NewMessage(watermill.NewUUID(), []byte("latency"))
					if keyed {
						m.Metadata.Set(publisher.MetadataOrderingKey, "k"+strconv.Itoa(i%50))
					}
					tx, err := ob.Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := tx.Publish("lat", m); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
					commits = append(commits, time.Since(t0))
					select {
					case at := <-target.ch:
						lat = append(lat, at.Sub(t0))
					case <-time.After(10 * time.Second):
						b.Fatal("message not forwarded within 10s")
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				slices.Sort(commits)
				pct := func(d []time.Duration, p float64) float64 {
					return float64(d[int(float64(len(d)-1)*p)]) / float64(time.Millisecond)
				}
				b.ReportMetric(pct(lat, 0.50), "p50_ms")
				b.ReportMetric(pct(lat, 0.99), "p99_ms")
				b.ReportMetric(pct(commits, 0.50), "commit_p50_ms")
			})
		}
	}
}

// waitAnyLease waits until the store's lanes are leased (a single forwarder takes all).
func waitAnyLease(tb testing.TB, st outbox.Store, d time.Duration) {
	tb.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		ls, err := st.Leases(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if len(ls) >= st.Options().Lanes {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("lanes not leased within %s", d)
}

// quiesce drops a drained table and waits until the database has no background work
// left from it (MariaDB's purge of the deleted rows' undo history), so that the next
// measured run does not pay for the previous one.
func quiesce(tb testing.TB, e chaos.Engine, db *sql.DB, opts outbox.Options) {
	tb.Helper()
	testenv.Bounded(tb, "drop the drained tables", testenv.CleanupTimeout, func(ctx context.Context) error { return e.Drop(ctx, db, opts) })
	if e.Driver != "mysql" {
		return
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var n int64
		err := db.QueryRow(`SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'`).Scan(&n)
		if err != nil || n < 1000 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runInRouter runs fwd as the handler of a Watermill router of its own until the test
// ends or stop is called.
func runInRouter(tb testing.TB, fwd *forwarder.Forwarder) (stop func()) {
	tb.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := fwd.AddToRouter(r); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("router: %v", err)
			}
			_ = fwd.Close()
		})
	}
	tb.Cleanup(stop)
	return stop
}

// twoDecimals rounds ratios for a log line.
func twoDecimals(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x*100) / 100
	}
	return out
}
