package forwarder_test

import (
	"context"
	"slices"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestE2E_TargetFailingBackoff: the target publisher fails for 3 s. The forwarder backs
// off (the publish attempts per message stay within what the exponential schedule
// allows in that window: no hot loop; of the ordered messages only the heads of keys,
// at most KeysInFlight per lane, are tried), loses nothing, and drains in order once
// the target recovers.
func TestE2E_TargetFailingBackoff(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testTargetFailing(t, e)
		})
	}
}

func testTargetFailing(t *testing.T, e chaos.Engine) {
	const (
		lanesN    = 64
		keys      = 10
		window    = 3 * time.Second
		retryBase = 50 * time.Millisecond
		retryMax  = 400 * time.Millisecond
	)
	db, _ := e.Open(t)
	store := e.Table(t, db, lanesN)
	rec := chaos.NewRecorder()
	flaky := chaos.NewFlaky(&chaos.RecordingPublisher{Recorder: rec})
	flaky.SetFailing(true)
	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"": flaky}, forwarder.Config{
		RetryBase: retryBase, RetryMax: retryMax, MaxAttempts: 1000,
	})
	chaos.RunForwarder(t, fwd)
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyed := chaos.KeyedMessages(200, keys, "t")
	unordered := chaos.KeyedMessages(200, 0, "t")
	all := append(slices.Clone(keyed), unordered...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := chaos.WriteAll(ctx, ob, db, "t", all, 2, 50); err != nil {
		t.Fatal(err)
	}
	time.Sleep(window - time.Since(start))
	flaky.SetFailing(false)
	failed := flaky.FailedAttempts()

	// While failing, only key heads were retried: Run offers a key's rows of a run once
	// in one Publish call, and after that failure only the failed head, alone; a failed
	// key stops the run from starting more keys, so at most KeysInFlight keys per used
	// lane have a message offered more than once.
	usedLanes := map[int]bool{}
	keysOfLane := map[int]map[string]bool{}
	for i := 0; i < keys; i++ {
		key := keyed[i].Metadata.Get(publisher.MetadataOrderingKey)
		lane := lanes.Of(key, lanesN)
		usedLanes[lane] = true
		if keysOfLane[lane] == nil {
			keysOfLane[lane] = map[string]bool{}
		}
		keysOfLane[lane][key] = true
	}
	retryBound := 0
	for _, ks := range keysOfLane {
		retryBound += min(len(ks), forwarder.KeysInFlightDefault)
	}
	offeredKeyed, retriedKeyed, maxPer := 0, 0, 0
	for _, m := range keyed {
		if n := flaky.AttemptsOf(m.UUID); n > 0 {
			offeredKeyed++
			maxPer = max(maxPer, n)
			if n > 1 {
				retriedKeyed++
			}
		}
	}
	offeredUnordered := 0
	for _, m := range unordered {
		if n := flaky.AttemptsOf(m.UUID); n > 0 {
			offeredUnordered++
			maxPer = max(maxPer, n)
		}
	}
	// Exponential schedule with -20% jitter: 40, 80, 160, 320, then 320 ms per attempt:
	// about 12 attempts fit in 3 s; allow slack for polling and scheduling.
	const perMessageBound = 16
	t.Logf("%s: %d publish attempts failed in %s: %d ordered offered (%d retried; lanes used %d) + %d unordered offered, max %d attempts per message",
		e.Name, failed, window, offeredKeyed, retriedKeyed, len(usedLanes), offeredUnordered, maxPer)
	if retriedKeyed > retryBound {
		t.Errorf("%d ordered messages offered more than once while failing, want at most one head per key, KeysInFlight per lane (%d over %d lanes)", retriedKeyed, retryBound, len(usedLanes))
	}
	if maxPer > perMessageBound {
		t.Errorf("a message was offered %d times in %s: backoff (base %s, cap %s) allows about 12 (hot loop?)", maxPer, window, retryBase, retryMax)
	}
	if bound := int64((offeredKeyed + offeredUnordered) * perMessageBound); failed > bound {
		t.Errorf("%d failed attempts, bound %d", failed, bound)
	}

	ok := rec.WaitUnique(len(all), 10*time.Second, 30*time.Second)
	t.Logf("drained after recovery=%v in %s", ok, time.Since(start)-window)
	chaos.CheckDelivered(t, rec, chaos.UUIDsOf(all))
	e.WaitEmpty(t, db, store.Options(), 10*time.Second)
}

// TestE2E_PoisonMessage: one ordered message always fails. After MaxAttempts it is
// parked with the publisher's error; by default its lane continues (the other messages
// of its key and lane are delivered); with HoldParkedKeys only the later messages of its
// key are held while the other keys of the same lane flow on.
func TestE2E_PoisonMessage(t *testing.T) {
	for _, hold := range []bool{false, true} {
		name := "continue_lane"
		if hold {
			name = "hold_parked_key"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testPoison(t, chaos.MariaDB, hold)
		})
	}
}

func testPoison(t *testing.T, e chaos.Engine, hold bool) {
	const lanesN = 4 // few lanes: keys share lanes
	db, _ := e.Open(t)
	store := e.Table(t, db, lanesN)
	rec := chaos.NewRecorder()
	flaky := chaos.NewFlaky(&chaos.RecordingPublisher{Recorder: rec})
	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"": flaky}, forwarder.Config{
		RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, MaxAttempts: 3,
		HoldParkedKeys: hold,
	})
	msgs := chaos.KeyedMessages(200, 20, "p")
	poison := msgs[40] // key k0, seq 2
	poisonKey := poison.Metadata.Get(publisher.MetadataOrderingKey)
	poisonLane := lanes.Of(poisonKey, lanesN)
	flaky.Poison(poison.UUID)
	var sameKeyLater, sameLaneOtherKeys, rest []string
	for i, m := range msgs {
		k := m.Metadata.Get(publisher.MetadataOrderingKey)
		switch {
		case m == poison:
		case k == poisonKey && i > 40:
			sameKeyLater = append(sameKeyLater, m.UUID)
		case k != poisonKey && lanes.Of(k, lanesN) == poisonLane:
			sameLaneOtherKeys = append(sameLaneOtherKeys, m.UUID)
		default:
			rest = append(rest, m.UUID)
		}
	}
	if len(sameLaneOtherKeys) == 0 {
		t.Fatal("test setup: no other key shares the poison message's lane")
	}
	chaos.RunForwarder(t, fwd)
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := chaos.WriteAll(ctx, ob, db, "p", msgs, 1, 200); err != nil {
		t.Fatal(err)
	}
	want := len(msgs) - 1
	if hold {
		want -= len(sameKeyLater)
	}
	rec.WaitUnique(want, 5*time.Second, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // anything held must stay held

	if m := rec.Missing(append(slices.Clone(rest), sameLaneOtherKeys...)); len(m) > 0 {
		t.Errorf("%d messages of other keys not delivered: the poison message blocked them", len(m))
	}
	if hold {
		if got := len(sameKeyLater) - len(rec.Missing(sameKeyLater)); got != 0 {
			t.Errorf("HoldParkedKeys: %d later messages of the parked key were delivered, want 0", got)
		}
	} else if m := rec.Missing(sameKeyLater); len(m) > 0 {
		t.Errorf("%d later messages of the poison key not delivered (the lane should continue)", len(m))
	}
	if rec.Unique() > want {
		t.Errorf("delivered %d, want %d (the poison message must not be delivered)", rec.Unique(), want)
	}
	// Run publishes a lane run in one call; a failed call is published again one message
	// at a time, within the same attempt, and a row that failed before goes alone: the
	// poison message is offered MaxAttempts times, plus once in its first run's call.
	if n := flaky.AttemptsOf(poison.UUID); n < 3 || n > 4 {
		t.Errorf("poison message offered %d times, want MaxAttempts = 3 (+1 in a failed batch call)", n)
	}
	parked, err := store.ListParked(ctx, outbox.ParkedQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].MessageUUID != poison.UUID {
		t.Fatalf("parked rows %d, want exactly the poison message", len(parked))
	}
	if parked[0].Attempts != 3 || parked[0].LastError == "" {
		t.Errorf("parked row attempts %d last_error %q", parked[0].Attempts, parked[0].LastError)
	}
	t.Logf("parked after %d attempts: %s", parked[0].Attempts, parked[0].LastError)
	if s := rec.Summary(); len(s.Violations) > 0 {
		t.Errorf("order violations: %v", s.Violations)
	}
}
