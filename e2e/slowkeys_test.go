package e2e_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// slowKeysPublisher records every message in a chaos.Recorder, sleeping delay before
// recording a message of a slow key (a broker partition that crawls).
type slowKeysPublisher struct {
	rec   *chaos.Recorder
	slow  map[string]bool
	delay time.Duration
}

func (p *slowKeysPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if key, _ := chaos.KeySeq(m); p.slow[key] {
			time.Sleep(p.delay)
		}
		p.rec.RecordMessage(m)
	}
	return nil
}

func (p *slowKeysPublisher) Close() error { return nil }

// TestE2E_SlowKeys: the target takes 300 ms per message for two ordering keys (in two
// lanes of their own) and no time for the others. Lanes are independent: the other six
// lanes must drain while the two slow keys are still far from done, and then
// everything drains, with no message lost and per-key order kept.
//
// The slow keys have 40 messages each (12 s of sleeping each, in parallel); the fast
// lanes hold 48 keys of 25 messages. "Far from done" is asserted as: when the last fast
// message is delivered, at most three quarters of the slow messages are, which leaves
// the fast lanes a margin of about nine seconds on a loaded machine (they take well
// under two seconds here).
func TestE2E_SlowKeys(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testSlowKeys(t, e)
		})
	}
}

func testSlowKeys(t *testing.T, e chaos.Engine) {
	const laneCount, fastKeys = 8, 48
	const delay = 300 * time.Millisecond
	slowPerKey, fastPerKey := 40, 25
	if chaos.FullRun() {
		slowPerKey, fastPerKey = 100, 200
	}
	// Two slow keys in two lanes of their own; the fast keys avoid those lanes.
	var slowKeys, keys []string
	slowLanes := map[int]bool{}
	for n := 0; len(keys) < fastKeys+2; n++ {
		k := "k" + strconv.Itoa(n)
		l := lanes.Of(k, laneCount)
		switch {
		case len(slowKeys) < 2 && !slowLanes[l]:
			slowKeys = append(slowKeys, k)
			slowLanes[l] = true
			keys = append(keys, k)
		case len(slowKeys) == 2 && !slowLanes[l]:
			keys = append(keys, k)
		}
	}
	slow := map[string]bool{slowKeys[0]: true, slowKeys[1]: true}
	perKey := func(k string) int {
		if slow[k] {
			return slowPerKey
		}
		return fastPerKey
	}

	db, _ := e.Open(t)
	store := e.Table(t, db, laneCount)
	topic := chaos.UniqueName("slowkeys_")
	msgs := orderedMessages(topic, keys, perKey)
	var slowUUIDs, fastUUIDs []string
	for _, m := range msgs {
		if k, _ := chaos.KeySeq(m); slow[k] {
			slowUUIDs = append(slowUUIDs, m.UUID)
		} else {
			fastUUIDs = append(fastUUIDs, m.UUID)
		}
	}
	writeBacklog(t, store, db, topic, msgs)
	t.Logf("slow keys %v in lanes %s (%d messages, %s each); %d fast messages in the other lanes",
		slowKeys, lanesList(slowLanes), len(slowUUIDs), delay, len(fastUUIDs))

	rec := chaos.NewRecorder()
	pub := &slowKeysPublisher{rec: rec, slow: slow, delay: delay}
	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"": pub}, forwarder.Config{})
	began := time.Now()
	stop := chaos.RunForwarder(t, fwd)

	var slowDone int
	if !waitUntil(2*time.Minute, func() bool { return len(rec.Missing(fastUUIDs)) == 0 }) {
		t.Fatalf("%d of %d fast messages not delivered within 2 min", len(rec.Missing(fastUUIDs)), len(fastUUIDs))
	}
	slowDone = len(slowUUIDs) - len(rec.Missing(slowUUIDs))
	t.Logf("fast lanes drained in %s; the slow keys had %d of %d messages delivered then",
		time.Since(began).Round(time.Millisecond), slowDone, len(slowUUIDs))
	if slowDone > len(slowUUIDs)*3/4 {
		t.Errorf("the fast lanes finished only when %d of %d slow messages were delivered: slow lanes held the others back", slowDone, len(slowUUIDs))
	}
	if !waitUntil(2*time.Minute, func() bool { return rec.Unique() >= len(msgs) }) {
		t.Errorf("not drained within 2 min of the fast lanes")
	}
	t.Logf("all drained in %s", time.Since(began).Round(time.Millisecond))
	stop()
	sum := chaos.CheckDelivered(t, rec, chaos.UUIDsOf(msgs))
	t.Logf("lost=%d order_violations=%d duplicates=%d", len(rec.Missing(chaos.UUIDsOf(msgs))), len(sum.Violations), sum.Duplicates)
	e.WaitEmpty(t, db, store.Options(), 10*time.Second)
}
