package e2e_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
)

// TestE2E_SkewedClocks runs three forwarders over one table whose clocks (Config.Now,
// every instant they give the store: lease and claim expiries, due times) disagree by
// ±5 s, more than twice their LeaseTTL (2 s): one runs 5 s ahead, one 5 s behind, one
// on time. The forwarder documents that lease expiries are compared on the caller's
// clock, so with such skew a forwarder ahead sees its peers' leases as expired and may
// take them while their holders still believe them live; what must hold regardless is
// the fencing: a holder whose lease was taken cannot complete (delete) a row under it,
// and each row is sent only after the previous one of its lane was deleted by a
// statement fenced by the lease. So lanes may see duplicates, but never a lost message
// or a per-key order violation among first deliveries.
//
// During the drain of an ordered backlog (64 keys in 8 lanes, thousands of rows) the
// test closes one forwarder and starts a new one with the same clock after each tenth
// of the backlog, round robin, so that lanes keep moving between skewed holders. All
// sends land in one in-process recorder (synchronously, inside Publish). Asserted: 0
// lost, 0 order violations, duplicates at most two per lane per start or close of a
// forwarder (a forwarder takes lanes, its skewed clock's steals included, only when it
// is below its share, that is after a start or a close): a lane that moves repeats at
// most the row in flight and the one sent right after a successful delete. The number
// of lanes the forwarders logged as lost is printed, to show that the skew does make
// lanes change hands under their holders.
func TestE2E_SkewedClocks(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testSkew(t, e)
		})
	}
}

func testSkew(t *testing.T, e chaos.Engine) {
	const laneCount, keyCount = 8, 64
	const leaseTTL = 2 * time.Second
	perKey, rotations := 60, 10
	if chaos.FullRun() {
		perKey, rotations = 300, 20
	}
	db, _ := e.Open(t)
	store := e.Table(t, db, laneCount)
	topic := chaos.UniqueName("skew_")
	keys := keysCoveringLanes(t, keyCount, laneCount)
	msgs := orderedMessages(topic, keys, func(string) int { return perKey })
	total := len(msgs)
	writeBacklog(t, store, db, topic, msgs)

	rec := chaos.NewRecorder()
	pub := &chaos.RecordingPublisher{Recorder: rec}
	offsets := []time.Duration{5 * time.Second, -5 * time.Second, 0}
	var lost atomic.Int64
	gen := make([]int, len(offsets))
	stops := make([]func(), len(offsets))
	start := func(i int) {
		off := offsets[i]
		gen[i]++
		fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{
			Owner:    fmt.Sprintf("skew%+ds-gen%d", int(off/time.Second), gen[i]),
			LeaseTTL: leaseTTL, ClaimTTL: 2 * leaseTTL, ShutdownTimeout: 5 * time.Second,
			Now: func() time.Time { return time.Now().Add(off) },
		}, lostCounter{&lost})
		if err != nil {
			t.Fatal(err)
		}
		stops[i] = chaos.RunForwarder(t, fwd)
	}
	began := time.Now()
	for i := range offsets {
		start(i)
	}
	for r := 1; r <= rotations; r++ {
		want := total * r / (rotations + 1)
		if !rec.WaitUnique(want, 60*time.Second, 3*time.Minute) {
			t.Fatalf("rotation %d: %d of %d messages delivered, no progress for 60 s (%s)", r, rec.Unique(), total, rec.Summary())
		}
		i := (r - 1) % len(offsets)
		stops[i]()
		start(i)
	}
	ok := rec.WaitUnique(total, 60*time.Second, 3*time.Minute)
	t.Logf("delivered all=%v in %s with %d restarts", ok, time.Since(began).Round(time.Millisecond), rotations)
	for _, stop := range stops {
		stop()
	}

	sum := chaos.CheckDelivered(t, rec, chaos.UUIDsOf(msgs))
	events := rotations*2 + len(offsets)
	bound := 2 * laneCount * events
	t.Logf("lost=%d order_violations=%d duplicates=%d (bound %d); the forwarders logged %d lanes lost (taken over or refused)",
		len(rec.Missing(chaos.UUIDsOf(msgs))), len(sum.Violations), sum.Duplicates, bound, lost.Load())
	checkDupBound(t, sum, bound, "two per lane per lane-moving event")
	e.WaitEmpty(t, db, store.Options(), 10*time.Second)
}

// lostCounter is a silent logger that counts the forwarder's reports of a lane lost
// under it (log text, for the test's report only: nothing is asserted on it).
type lostCounter struct{ n *atomic.Int64 }

func (l lostCounter) count(msg string) {
	if strings.Contains(msg, "lost") || strings.Contains(msg, "refused") {
		l.n.Add(1)
	}
}
func (l lostCounter) Error(msg string, _ error, _ watermill.LogFields) { l.count(msg) }
func (l lostCounter) Info(msg string, _ watermill.LogFields)           { l.count(msg) }
func (l lostCounter) Debug(string, watermill.LogFields)                {}
func (l lostCounter) Trace(string, watermill.LogFields)                {}
func (l lostCounter) With(watermill.LogFields) watermill.LoggerAdapter { return l }
