package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/e2e/internal/brokers"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Environment of the child forwarder process.
const (
	envEngine  = "OUTBOX_CHAOS_ENGINE"
	envDSN     = "OUTBOX_CHAOS_DSN"
	envPrefix  = "OUTBOX_CHAOS_PREFIX"
	envLanes   = "OUTBOX_CHAOS_LANES"
	envBrokers = "OUTBOX_CHAOS_BROKERS"
	envOwner   = "OUTBOX_CHAOS_OWNER"
	envLease   = "OUTBOX_CHAOS_LEASE_TTL"
)

// Short lease and claim lifetimes so that the takeover happens within seconds: the dead
// forwarder's lanes move after LeaseTTL, and its claimed head rows free the lane after
// ClaimTTL.
// OUTBOX_CRASH_CLAIM_TTL overrides the claim lifetime (to measure the takeover with the
// default, for example).
const crashLeaseTTL = 1500 * time.Millisecond

func crashClaimTTL() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("OUTBOX_CRASH_CLAIM_TTL")); err == nil {
		return d
	}
	return 3 * time.Second
}

// TestHelperProcess is not a test: StartChild re-executes the test binary into it to run
// a forwarder in a process of its own, which the crash test kills with SIGKILL. It
// forwards one outbox table to the parent's in-process Kafka cluster.
func TestHelperProcess(t *testing.T) {
	if chaos.ChildRole() != "forwarder" {
		t.Skip("helper process for TestE2E_CrashSIGKILL")
	}
	var e chaos.Engine
	for _, c := range chaos.Engines {
		if c.Name == os.Getenv(envEngine) {
			e = c
		}
	}
	db := e.OpenDSN(t, os.Getenv(envDSN))
	laneCount, _ := strconv.Atoi(os.Getenv(envLanes))
	store, err := e.NewStore(db, outbox.Options{TablePrefix: os.Getenv(envPrefix), Lanes: laneCount})
	if err != nil {
		t.Fatal(err)
	}
	ttl, _ := time.ParseDuration(os.Getenv(envLease))
	pub, err := brokers.NewKafkaPublisher(strings.Split(os.Getenv(envBrokers), ","), brokers.KeyFromMetadata(publisher.MetadataOrderingKey))
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{Owner: os.Getenv(envOwner), LeaseTTL: ttl, ClaimTTL: crashClaimTTL()}, nil)
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

// TestE2E_CrashSIGKILL: three forwarders share a table, one of them in a separate
// process; it is killed with SIGKILL in the middle of the run. The two others take its
// lanes over once its leases expire (LeaseTTL 1.5 s); nothing is lost and per-key order
// holds on the Kafka consumer (a message the dead forwarder sent but could not complete
// is sent again: a duplicate, counted).
func TestE2E_CrashSIGKILL(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testCrash(t, e)
		})
	}
}

func testCrash(t *testing.T, e chaos.Engine) {
	const lanesN, keys = 64, 100
	total := 6000
	if chaos.FullRun() {
		total = 30000
	}
	db, dsn := e.Open(t)
	store := e.Table(t, db, lanesN)
	topic := chaos.UniqueName("crash_")
	addrs := brokers.StartKafka(t, topic)
	rec := chaos.NewRecorder()
	brokers.Consume(t, brokers.KafkaSubscriber(t, addrs), topic, rec.RecordMessage)

	childOwner := "child-" + chaos.UniqueName("")
	child := chaos.StartChild(t, "TestHelperProcess", "forwarder",
		envEngine+"="+e.Name, envDSN+"="+dsn, envPrefix+"="+store.Options().TablePrefix,
		envLanes+"="+strconv.Itoa(lanesN), envBrokers+"="+strings.Join(addrs, ","),
		envOwner+"="+childOwner, envLease+"="+crashLeaseTTL.String())

	fwds := make([]*forwarder.Forwarder, 2)
	for i := range fwds {
		pub := brokers.KafkaPublisher(t, addrs, brokers.KeyFromMetadata(publisher.MetadataOrderingKey))
		fwds[i] = chaos.NewForwarder(t, store, forwarder.Targets{"": pub}, forwarder.Config{
			Owner: fmt.Sprintf("parent-%d", i), LeaseTTL: crashLeaseTTL, ClaimTTL: crashClaimTTL(),
		})
		chaos.RunForwarder(t, fwds[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Wait until the lanes are spread over the three forwarders.
	childLanes := waitLeases(t, store, childOwner, lanesN/3-1, 15*time.Second)
	for i := range fwds {
		waitLeases(t, store, fmt.Sprintf("parent-%d", i), lanesN/3-1, 15*time.Second)
	}
	childLanes = leasesOf(t, store, childOwner)
	t.Logf("child %d holds %d lanes", child.Pid(), len(childLanes))

	ob, err := publisher.New(store, publisher.Config{Notifier: fwds[0]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := chaos.KeyedMessages(total, keys, topic)
	writeDone := make(chan error, 1)
	go func() {
		_, err := chaos.WriteAll(ctx, ob, db, topic, msgs, 4, 50)
		writeDone <- err
	}()

	// Kill the child once a quarter of the messages went out.
	rec.WaitUnique(total/4, 30*time.Second, 60*time.Second)
	childLanes = leasesOf(t, store, childOwner)
	child.Kill()
	killedAt := time.Now()
	before := rec.Unique()
	t.Logf("SIGKILLed the child holding %d lanes after %d deliveries", len(childLanes), before)
	if len(childLanes) == 0 {
		t.Fatalf("the child held no lanes when it was killed: the crash tested nothing")
	}

	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	ok := rec.WaitUnique(total, 20*time.Second+crashClaimTTL(), 2*time.Minute)
	t.Logf("all delivered=%v %s after the kill", ok, time.Since(killedAt).Round(time.Millisecond))
	chaos.CheckDelivered(t, rec, chaos.UUIDsOf(msgs))

	// Takeover time: when did each key of the dead forwarder's lanes deliver again?
	dead := map[int]bool{}
	for _, l := range childLanes {
		dead[l] = true
	}
	var worst time.Duration
	resumed, stuck := 0, 0
	firsts := rec.FirstAfter(killedAt)
	for k := 0; k < keys; k++ {
		key := "k" + strconv.Itoa(k)
		if !dead[lanes.Of(key, lanesN)] {
			continue
		}
		if at, ok := firsts[key]; ok {
			resumed++
			worst = max(worst, at.Sub(killedAt))
		} else {
			stuck++ // all its messages went out before the kill
		}
	}
	t.Logf("takeover: %d keys of the dead forwarder's lanes resumed, the last %s after the kill (LeaseTTL %s, ClaimTTL %s); %d keys had nothing left",
		resumed, worst.Round(time.Millisecond), crashLeaseTTL, crashClaimTTL(), stuck)

	// The dead forwarder's lanes belong to the survivors now.
	leases, err := store.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, l := range leases {
		if l.Owner == childOwner && l.ExpiresAt.After(now) {
			t.Errorf("lane %d still leased to the dead child until %s", l.Lane, l.ExpiresAt)
		}
	}
	e.WaitEmpty(t, db, store.Options(), 10*time.Second)
}

// leasesOf returns the lanes owner holds a live lease on.
func leasesOf(t testing.TB, store outbox.Store, owner string) []int {
	t.Helper()
	leases, err := store.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var out []int
	for _, l := range leases {
		if l.Owner == owner && l.ExpiresAt.After(now) {
			out = append(out, l.Lane)
		}
	}
	return out
}

// waitLeases waits until owner holds at least n live leases.
func waitLeases(t testing.TB, store outbox.Store, owner string, n int, d time.Duration) []int {
	t.Helper()
	end := time.Now().Add(d)
	for {
		got := leasesOf(t, store, owner)
		if len(got) >= n {
			return got
		}
		if time.Now().After(end) {
			t.Fatalf("%s holds %d lanes after %s, want at least %d", owner, len(got), d, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
