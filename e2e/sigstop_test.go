//go:build linux

package e2e_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// envCounter names the file whose first 8 bytes hold the child's send counter.
const envCounter = "OUTBOX_CHAOS_COUNTER_FILE"

// Lease of the SIGSTOP test's forwarders: short, so that the takeover comes within
// seconds. Lane row claims last no longer than the lease (ClaimTTL is above it).
const sigstopLeaseTTL = 1500 * time.Millisecond

// mapCounter maps the first 8 bytes of the file at path (shared with the other
// process) as a uint64 counter. Both processes map the same page of the page cache, so
// an atomic add in one is seen by an atomic load in the other.
func mapCounter(t testing.TB, path string) *uint64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open the counter file: %v", err)
	}
	defer f.Close()
	b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap the counter file: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return (*uint64)(unsafe.Pointer(&b[0]))
}

// TestHelperSigStop is not a test: TestE2E_SigStopLaneHolder re-executes the test
// binary into it to run a forwarder in a process it can stop with SIGSTOP. The
// forwarder's target records every send in the parent's send log, numbered by the
// shared counter at the start of Publish.
func TestHelperSigStop(t *testing.T) {
	if chaos.ChildRole() != "sigstop-forwarder" {
		t.Skip("helper process for TestE2E_SigStopLaneHolder")
	}
	var e chaos.Engine
	for _, c := range chaos.Engines {
		if c.Name == os.Getenv(envEngine) {
			e = c
		}
	}
	db := e.OpenDSN(t, os.Getenv(envDSN))
	laneCount, _ := strconv.Atoi(os.Getenv(envLanes))
	opts := outbox.Options{TablePrefix: os.Getenv(envPrefix), Lanes: laneCount}
	store, err := e.NewStore(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	ttl, _ := time.ParseDuration(os.Getenv(envLease))
	counter := mapCounter(t, os.Getenv(envCounter))
	pub := &loggingPublisher{log: openSendLog(e, db, opts), sender: "child", next: func() uint64 { return atomic.AddUint64(counter, 1) }}
	fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{
		Owner: os.Getenv(envOwner), LeaseTTL: ttl, ClaimTTL: 2 * ttl,
	}, watermill.NewStdLogger(false, false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	go func() {
		time.Sleep(100 * time.Millisecond)
		chaos.SignalReady()
	}()
	if err := fwd.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestE2E_SigStopLaneHolder stops the holder of every lane with SIGSTOP in the middle of
// a drain, for longer than its lease (LeaseTTL 1.5 s), lets a second forwarder take the
// lanes over, and resumes the holder while the second one is sending from them. A
// paused process cannot know it was paused; the forwarder's contract is that it checks
// its lease against its clock before every send, so that a holder that wakes up past
// its lease sends nothing more under it.
//
// Setup: a backlog of ordered rows over 64 keys in 8 lanes. The child (a re-exec of the
// test binary) runs the only forwarder at first, so it holds all 8 lanes; its target
// publisher records each send in a table of the same database (the send log) before
// Publish returns, with the sender's name, its wall time, and a number n taken from a
// counter at the start of Publish. The parent waits until a quarter of the backlog was
// sent, SIGSTOPs the child, starts a forwarder of its own (the peer, recording into the
// same log), waits until the peer has sent from every lane, SIGCONTs the child and lets
// both drain the backlog.
//
// Soundness of "sends after the resume", without comparing clocks: the counter lives in
// a file both processes map (MAP_SHARED), and the child takes each send's number with
// one atomic add on it. A stopped process executes no instruction, so once every thread
// of the child is stopped (state T in /proc/<pid>/task/*/stat) the parent reads the
// counter: S. Every send numbered n <= S began before the stop (its Publish was
// entered, so the forwarder had already decided to send it: a message in flight, whose
// record may land after the resume), and every send numbered n > S began after the
// SIGCONT. No clock of either process enters the classification; the wall times are
// printed for the reader only.
//
// Which lanes "the peer had taken": those it sent from before the SIGCONT (its records
// with an identity at most the log's greatest one read before the SIGCONT). Once the
// child is back, the two forwarders share the lanes (four each), so the peer may
// legitimately hand some lanes over to the child, which then sends from them after the
// resume. A handover is causal: the peer's last send of a lane returns (its record is
// written), its row is deleted and its lease released before the child can acquire the
// lane and send, so every such child record follows every peer record of that lane in
// the log (identities are allocated in execution order). A send of the child under its
// stale lease instead overlaps the peer's tenure: it is followed by a peer record of
// the same lane, or it repeats a message the peer had sent. So the check counts a
// child send numbered above S, in a lane the peer had taken, as a send after the
// resume under the lost lease when a peer record of that lane comes later in the log or
// the peer had sent the same message before; it must be 0. (This assumes no lane moves
// back from the child to the peer after a handover, which only a lapse of the child's
// heartbeat would cause; the test logs every child send after the resume, so such a
// case would be visible.) Other child sends after the resume are counted as handovers.
// A lane whose lease the peer itself lost (its renewals came too late, as on a loaded
// machine: the lease manager logs it) moved to the child by expiry, not by a handover,
// and the peer's last run there is sent again: such lanes are reported, not classified,
// and each such loss adds one run to the duplicate bound.
//
// Asserted too: every message delivered (0 lost), no per-key order violation among
// first deliveries (a redelivery of an earlier sequence is a duplicate), duplicates at
// most one run (LaneBatch rows, read but not yet deleted) per lane.
func TestE2E_SigStopLaneHolder(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testSigStop(t, e)
		})
	}
}

func testSigStop(t *testing.T, e chaos.Engine) {
	const laneCount, keyCount = 8, 64
	perKey := 80
	if chaos.FullRun() {
		perKey = 600
	}
	db, dsn := e.Open(t)
	store := e.Table(t, db, laneCount)
	opts := store.Options()
	slog := newSendLog(t, e, db, opts)
	topic := chaos.UniqueName("sigstop_")
	keys := keysCoveringLanes(t, keyCount, laneCount)
	msgs := orderedMessages(topic, keys, func(string) int { return perKey })
	total := len(msgs)
	writeBacklog(t, store, db, topic, msgs)

	counterPath := filepath.Join(t.TempDir(), "child-sends")
	if err := os.WriteFile(counterPath, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	counter := mapCounter(t, counterPath)

	start := time.Now()
	child := chaos.StartChild(t, "TestHelperSigStop", "sigstop-forwarder",
		envEngine+"="+e.Name, envDSN+"="+dsn, envPrefix+"="+opts.TablePrefix,
		envLanes+"="+strconv.Itoa(laneCount), envOwner+"=child",
		envLease+"="+sigstopLeaseTTL.String(), envCounter+"="+counterPath)
	pid := child.Pid()
	// A stopped child still dies by SIGKILL (StartChild's cleanup); SIGCONT first
	// anyway, so that nothing of it lingers stopped if the kill is late.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	if !waitUntil(90*time.Second, func() bool { u, _ := slog.progress(t); return u >= total/4 }) {
		u, _ := slog.progress(t)
		t.Fatalf("the child sent %d of %d messages in 90 s; wanted a quarter before stopping it", u, total)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	stoppedAt := time.Now()
	waitStopped(t, pid, 10*time.Second)
	s := atomic.LoadUint64(counter)
	uStop, _ := slog.progress(t)
	childLanes := slog.lanesSentBy(t, "child", laneCount)
	t.Logf("SIGSTOP child %d after %s: %d sends begun (S), %d of %d messages sent; child had sent from lanes %s",
		pid, stoppedAt.Sub(start).Round(time.Millisecond), s, uStop, total, lanesList(childLanes))

	var peerN atomic.Uint64
	peerPub := &loggingPublisher{log: slog, sender: "peer", next: func() uint64 { return peerN.Add(1) }}
	peerLost := &lapseLog{LoggerAdapter: watermill.NopLogger{}}
	peer, err := forwarder.New(store, forwarder.Targets{"": peerPub}, forwarder.Config{
		Owner: "peer", LeaseTTL: sigstopLeaseTTL, ClaimTTL: 2 * sigstopLeaseTTL,
	}, peerLost)
	if err != nil {
		t.Fatal(err)
	}
	stopPeer := chaos.RunForwarder(t, peer)

	var taken map[int]bool
	if !waitUntil(30*time.Second, func() bool {
		taken = slog.lanesSentBy(t, "peer", laneCount)
		return len(taken) == laneCount
	}) {
		// The takeover is blocked. Seen on MariaDB: the child stopped inside a
		// transaction of the store keeps its locks (its connection stays open), and the
		// peer's statements wait for them until the child resumes. Show who waits for
		// whom, then go on with the lanes taken, if any.
		t.Errorf("takeover blocked: 30 s after the SIGSTOP (LeaseTTL %s) the peer has sent from lanes %s only, of %d; the server's sessions:\n%s",
			sigstopLeaseTTL, lanesList(taken), laneCount, sessions(t, e, db))
		if len(taken) == 0 {
			t.FailNow()
		}
	}
	_, contID := slog.progress(t)
	taken = map[int]bool{}
	for _, r := range slog.records(t) {
		if r.Sender == "peer" && r.ID <= contID {
			taken[lanes.Of(r.Key, laneCount)] = true
		}
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	resumedAt := time.Now()
	uCont, _ := slog.progress(t)
	t.Logf("SIGCONT after %s stopped: the peer had sent from lanes %s; %d of %d messages sent",
		resumedAt.Sub(stoppedAt).Round(time.Millisecond), lanesList(taken), uCont, total)

	drained := waitUntil(2*time.Minute, func() bool { u, _ := slog.progress(t); return u >= total })
	t.Logf("drained=%v %s after the SIGCONT", drained, time.Since(resumedAt).Round(time.Millisecond))
	// Kill the child first: every send it completed is in the log then.
	child.Kill()
	stopPeer()

	recs := slog.records(t)
	rec := replay(recs)
	sum := chaos.CheckDelivered(t, rec, chaos.UUIDsOf(msgs))
	// A lease the peer lost after its tenure began (it missed its renewals: a loaded
	// machine) hands its lane to the child legitimately, and the run the peer had sent
	// but not deleted is sent again: one more run of duplicates per such loss.
	lapsed, lapses := peerLost.snapshot()
	checkDupBound(t, sum, (laneCount+lapses)*forwarder.LaneBatchDefault,
		fmt.Sprintf("one run per lane and per lease the peer lost (%d)", lapses))

	lastPeer := map[int]int64{}
	peerSentAt := map[string]int64{} // uuid -> identity of the peer's first record
	for _, r := range recs {
		if r.Sender != "peer" {
			continue
		}
		lastPeer[lanes.Of(r.Key, laneCount)] = r.ID
		if _, ok := peerSentAt[r.UUID]; !ok {
			peerSentAt[r.UUID] = r.ID
		}
	}
	beforeStop := map[int]int{} // lane -> child sends begun before the stop
	for _, r := range recs {
		if r.Sender == "child" && r.N <= s {
			beforeStop[lanes.Of(r.Key, laneCount)]++
		}
	}
	var stale []string
	var suspects []sendRec
	inFlightLate, afterResume, handover, afterResumeUntaken, afterLapse := 0, 0, 0, 0, 0
	for _, r := range recs {
		if r.Sender != "child" {
			continue
		}
		if r.N <= s {
			if r.ID > contID {
				inFlightLate++ // begun before the stop, recorded after the resume
			}
			continue
		}
		afterResume++
		lane := lanes.Of(r.Key, laneCount)
		if !taken[lane] {
			afterResumeUntaken++
			continue
		}
		if lapsed[lane] {
			afterLapse++
			continue
		}
		p, dup := peerSentAt[r.UUID]
		if r.ID < lastPeer[lane] || (dup && p < r.ID) {
			suspects = append(suspects, r)
			continue
		}
		handover++
	}
	// A send the child had checked before the stop but whose Publish call it entered
	// only after the resume (it was stopped between the two) carries n > S: the doc's
	// "a send it had started before the pause completes late". Each key part of a lane
	// run can hold one such call: after it, the worker checks the lease again and stops.
	// So one call per ordering key, at most KeysInFlight calls per lane, is that; more
	// is a send after the resume under the lost lease.
	checkedBefore, suspects := decidedBeforeStop(suspects, laneCount, forwarder.KeysInFlightDefault)
	for _, r := range suspects[:min(len(suspects), 20)] {
		lane := lanes.Of(r.Key, laneCount)
		p, dup := peerSentAt[r.UUID]
		stale = append(stale, fmt.Sprintf("lane %d key %s seq %d n=%d (S=%d) id=%d, last peer record of the lane id=%d, peer sent it before: %v, %s after the SIGCONT by the child's clock; the child had sent %d messages of the lane before the stop",
			lane, r.Key, r.Seq, r.N, s, r.ID, lastPeer[lane], dup && p < r.ID, r.Wall.Sub(resumedAt).Round(time.Millisecond), beforeStop[lane]))
	}
	staleN := len(suspects)
	t.Logf("lost=%d order_violations=%d duplicates=%d (bound %d); child sends begun before the stop and recorded after the resume: %d",
		len(rec.Missing(chaos.UUIDsOf(msgs))), len(sum.Violations), sum.Duplicates, (laneCount+lapses)*forwarder.LaneBatchDefault, inFlightLate)
	t.Logf("child sends after the SIGCONT: %d in all; under the lost lease in lanes the peer had taken: %d; after a handover from the peer: %d; in lanes the peer had not taken: %d; in lanes whose lease the peer lost (%s: not classified) %d; in a call checked before the stop and entered after the resume: %d",
		afterResume, staleN, handover, afterResumeUntaken, lanesList(lapsed), afterLapse, checkedBefore)
	if staleN > 0 {
		t.Errorf("the resumed child sent %d messages after the SIGCONT in lanes the peer held:\n  %s", staleN, strings.Join(stale, "\n  "))
	}
}

// decidedBeforeStop takes from suspects (child sends after the resume that overlap the
// peer's tenure) the Publish calls that a worker had checked before the stop: one call
// (one n) per ordering key and at most perLane calls per lane. It returns how many
// sends that accounts for and the suspects left.
func decidedBeforeStop(suspects []sendRec, laneCount, perLane int) (int, []sendRec) {
	callsOfKey := map[string]map[uint64]bool{}
	callsOfLane := map[int]map[uint64]bool{}
	for _, r := range suspects {
		if callsOfKey[r.Key] == nil {
			callsOfKey[r.Key] = map[uint64]bool{}
		}
		callsOfKey[r.Key][r.N] = true
		lane := lanes.Of(r.Key, laneCount)
		if callsOfLane[lane] == nil {
			callsOfLane[lane] = map[uint64]bool{}
		}
		callsOfLane[lane][r.N] = true
	}
	n := 0
	var left []sendRec
	for _, r := range suspects {
		if len(callsOfKey[r.Key]) == 1 && len(callsOfLane[lanes.Of(r.Key, laneCount)]) <= perLane {
			n++
			continue
		}
		left = append(left, r)
	}
	return n, left
}

// lapseLog is the peer's logger: it notes the lanes whose lease the peer lost (its
// renewal came too late and the child took the lane), where the log's order no longer
// tells a stale send from a takeover.
type lapseLog struct {
	watermill.LoggerAdapter
	mu    sync.Mutex
	lanes map[int]bool
	n     int
}

func (l *lapseLog) Info(msg string, fields watermill.LogFields) {
	l.note(msg, fields)
	l.LoggerAdapter.Info(msg, fields)
}

func (l *lapseLog) Error(msg string, err error, fields watermill.LogFields) {
	l.note(msg, fields)
	l.LoggerAdapter.Error(msg, err, fields)
}

// note counts a message that reports a lane's lease lost or expired.
func (l *lapseLog) note(msg string, fields watermill.LogFields) {
	if !strings.HasPrefix(msg, "Lane lease lost") && !strings.HasPrefix(msg, "Lane lease expired") {
		return
	}
	if lane, ok := fields["lane"].(int); ok {
		l.mu.Lock()
		if l.lanes == nil {
			l.lanes = map[int]bool{}
		}
		l.lanes[lane] = true
		l.n++
		l.mu.Unlock()
	}
}

func (l *lapseLog) With(fields watermill.LogFields) watermill.LoggerAdapter { return l }

// snapshot returns the lanes whose lease was lost and how many losses there were.
func (l *lapseLog) snapshot() (map[int]bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]bool{}
	for k := range l.lanes {
		out[k] = true
	}
	return out, l.n
}

// waitStopped waits until every thread of pid is stopped (state T or t).
func waitStopped(t testing.TB, pid int, d time.Duration) {
	t.Helper()
	var last string
	if !waitUntil(d, func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			last = err.Error()
			return false
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				last = err.Error()
				return false
			}
			st := string(b)
			i := strings.LastIndexByte(st, ')')
			if i < 0 || i+2 >= len(st) || (st[i+2] != 'T' && st[i+2] != 't') {
				last = fmt.Sprintf("thread %s: %.60s", task.Name(), st)
				return false
			}
		}
		return true
	}) {
		t.Fatalf("child %d not stopped within %s: %s", pid, d, last)
	}
}

// sessions describes the server's open transactions and sessions on the test's
// database (who waits, who holds a transaction open, and its last statement), for the
// report of a blocked takeover.
func sessions(t testing.TB, e chaos.Engine, db *sql.DB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queries := []string{
		`SELECT pid, state, COALESCE(wait_event_type, '') || ':' || COALESCE(wait_event, ''),
			COALESCE(EXTRACT(EPOCH FROM now() - xact_start)::text, ''), pg_blocking_pids(pid)::text, LEFT(query, 300)
		 FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()`,
	}
	if e.Driver != "pgx" {
		queries = []string{
			`SELECT t.trx_mysql_thread_id, t.trx_state, CONCAT('started ', t.trx_started), CONCAT('rows locked ', t.trx_rows_locked),
				CONCAT('tables locked ', t.trx_tables_locked), COALESCE(LEFT(t.trx_query, 300), CONCAT('(idle) ', COALESCE(LEFT(p.INFO, 300), '')))
			 FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id`,
			`SELECT CONCAT('waiting trx ', requesting_trx_id), CONCAT('blocked by trx ', blocking_trx_id), '', '', '', '' FROM information_schema.INNODB_LOCK_WAITS`,
		}
	}
	var b strings.Builder
	for _, q := range queries {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
			continue
		}
		for rows.Next() {
			var c [6]sql.NullString
			if err := rows.Scan(&c[0], &c[1], &c[2], &c[3], &c[4], &c[5]); err != nil {
				fmt.Fprintf(&b, "  (%v)\n", err)
				break
			}
			fmt.Fprintf(&b, "  %s | %s | %s | %s | %s | %s\n", c[0].String, c[1].String, c[2].String, c[3].String, c[4].String, c[5].String)
		}
		rows.Close()
	}
	return b.String()
}
