package forwarder

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// runResult is what sending a lane run did: the rows delivered, the rows that failed
// (at most one per ordering key: a key's part of the run ends at its first failure),
// and whether the lane must stop.
type runResult struct {
	sent  []outbox.ID
	seqs  []int64 // the sent rows' Seq, one per id
	fails []rowFailure
	stop  bool // the lease is gone, the forwarder is abandoning, or the lane is handed over
}

// rowFailure is a row of a run that was not delivered.
type rowFailure struct {
	rec    *outbox.Record
	reason string // stored as the row's last error
	park   bool   // it cannot be sent, or its attempts are used up
}

// keyPart is the rows of one ordering key in a lane run (indexes into the head, in id
// order) and how far sending them got.
type keyPart struct {
	rows []int
	msgs []*message.Message // the messages of one Publish call; reused
	sent int                // the leading rows delivered
	fail *rowFailure
	stop bool
}

// sendRun sends the head run: each ordering key's rows in id order, up to KeysInFlight
// keys at once, and says what was delivered. After a key's row fails to be sent (the
// target may be down), no further key of the run is started: a target outage costs a
// lane at most KeysInFlight attempts per retry, not one per key of the run.
func (w *laneWorker) sendRun() *runResult {
	parts := w.split()
	w.halt.Store(false)
	var next atomic.Int32
	work := func() {
		for !w.halt.Load() {
			i := int(next.Add(1)) - 1
			if i >= len(parts) {
				return
			}
			w.sendPart(&parts[i])
		}
	}
	// n-1 helpers and the worker itself take the parts in turn.
	var wg sync.WaitGroup
	for range min(len(parts), w.cfg.KeysInFlight) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return w.collect(parts)
}

// split cuts the head run into one part per ordering key (reusing the worker's
// storage). With KeysInFlight 1 or StopLaneOnPoison the whole run is one part, sent in
// id order: a parked row then stops the rows after it, whatever their key.
func (w *laneWorker) split() []keyPart {
	w.parts = w.parts[:0]
	if w.cfg.KeysInFlight == 1 || w.cfg.StopLaneOnPoison {
		p := w.nextPart()
		for i := range w.head {
			p.rows = append(p.rows, i)
		}
		return w.parts
	}
	clear(w.partOf)
	for i := range w.head {
		k, ok := w.partOf[w.head[i].OrderingKey]
		if !ok {
			k = len(w.parts)
			w.nextPart()
			w.partOf[w.head[i].OrderingKey] = k
		}
		w.parts[k].rows = append(w.parts[k].rows, i)
	}
	return w.parts
}

// nextPart appends an empty part to w.parts, reusing the storage of an earlier run's.
func (w *laneWorker) nextPart() *keyPart {
	if len(w.parts) == cap(w.parts) {
		w.parts = append(w.parts, keyPart{})
		return &w.parts[len(w.parts)-1]
	}
	w.parts = w.parts[:len(w.parts)+1]
	p := &w.parts[len(w.parts)-1]
	clear(p.msgs[:cap(p.msgs)]) // the last run's messages: let them go
	*p = keyPart{rows: p.rows[:0], msgs: p.msgs[:0]}
	return p
}

// collect gathers the parts' outcomes into the worker's reused runResult.
func (w *laneWorker) collect(parts []keyPart) *runResult {
	res := &w.res
	res.sent, res.seqs, res.fails, res.stop = res.sent[:0], res.seqs[:0], res.fails[:0], false
	for i := range parts {
		p := &parts[i]
		for _, r := range p.rows[:p.sent] {
			res.sent = append(res.sent, w.head[r].ID)
			res.seqs = append(res.seqs, w.head[r].Seq)
		}
		if p.fail != nil {
			res.fails = append(res.fails, *p.fail)
		}
		res.stop = res.stop || p.stop
	}
	return res
}

// sendPart sends one key's rows: straight to the targets with Run, through the router
// otherwise.
func (w *laneWorker) sendPart(p *keyPart) {
	if w.f.direct {
		w.publishPart(p)
	} else {
		w.emitPart(p)
	}
}

// emitPart hands a part's rows to the router one at a time, each after the previous
// one was acked: a router may handle messages concurrently, so this is what keeps a
// key's rows in order.
func (w *laneWorker) emitPart(p *keyPart) {
	f := w.f
	counters := &f.counters[w.lane+1]
	var rt renewTicker
	defer rt.stop()
	for k, i := range p.rows {
		if w.draining() || !w.h.live(f.mono()) {
			return
		}
		rec := &w.head[i]
		msg, d, reason := w.prepare(i)
		if reason != "" {
			p.fail = &rowFailure{rec: rec, reason: reason, park: true}
			return
		}
		counters.inFlight.Add(1)
		f.reportInFlight(w.lane)
		acked, settled := w.deliver(msg, &rt)
		counters.inFlight.Add(-1)
		f.reportInFlight(w.lane)
		switch {
		case !settled:
			p.stop = true
			return
		case !acked:
			p.fail = &rowFailure{rec: rec, reason: d.failure()}
			w.halt.Store(true)
			return
		}
		p.sent = k + 1
	}
}

// deliver emits msg and waits for its ack or nack; settled is false when the lease was
// lost or the forwarder abandons its messages first.
func (w *laneWorker) deliver(msg *message.Message, rt *renewTicker) (acked, settled bool) {
	if !w.f.emit(w.h.ctx, msg, rt, time.Hour, func() {}) {
		return false, false
	}
	switch await(msg, nil, w.h.ctx.Done(), w.f.abandon) {
	case outcomeAcked:
		return true, true
	case outcomeNacked:
		return false, true
	}
	return false, false
}

// publishPart publishes a part's rows straight to the target publishers (Run, no
// router): consecutive rows of one transport and topic go in one Publish call, which
// Watermill's publishers send in order. When a call fails, its messages are published
// again one at a time, so that the failure lands on the row that causes it; a row that
// failed before is published alone.
func (w *laneWorker) publishPart(p *keyPart) {
	f := w.f
	for p.sent < len(p.rows) {
		if w.draining() || !w.h.live(f.mono()) {
			return
		}
		start := p.sent
		end, reason := w.batch(p, start)
		if len(p.msgs) > 0 && !w.publishBatch(p, start) {
			return
		}
		p.sent = end
		if reason != "" {
			p.fail = &rowFailure{rec: &w.head[p.rows[end]], reason: reason, park: true}
			return
		}
	}
}

// batch prepares in p.msgs the rows of p from start that go in one Publish call; end
// is the row after them, and reason is set when that row cannot be sent at all.
func (w *laneWorker) batch(p *keyPart, start int) (end int, reason string) {
	first := &w.head[p.rows[start]]
	p.msgs = p.msgs[:0]
	for end = start; end < len(p.rows); end++ {
		r := &w.head[p.rows[end]]
		if end > start && (r.Transport != first.Transport || r.Destination != first.Destination ||
			r.Attempts > 0 || first.Attempts > 0) {
			break // a row that failed before goes alone: its next failure is its own
		}
		var msg *message.Message
		if msg, _, reason = w.prepare(p.rows[end]); reason != "" {
			break
		}
		p.msgs = append(p.msgs, msg)
	}
	return end, reason
}

// publishBatch publishes p.msgs, the rows of p from start; false (with p.sent and
// p.fail set) when one of them failed.
func (w *laneWorker) publishBatch(p *keyPart, start int) bool {
	f := w.f
	counters := &f.counters[w.lane+1]
	first := &w.head[p.rows[start]]
	counters.inFlight.Add(int64(len(p.msgs)))
	f.reportInFlight(w.lane)
	returned, err := w.publish(first.Transport, first.Destination, p.msgs)
	counters.inFlight.Add(-int64(len(p.msgs)))
	f.reportInFlight(w.lane)
	if !returned {
		p.msgs, p.stop = nil, true // the abandoned call keeps its slice; no run reuses it
		return false
	}
	failed := start
	if err != nil && len(p.msgs) > 1 {
		// Which of the messages went out is unknown: send them one at a time, so that
		// the failure lands on the row that causes it (a poison message must not fail
		// the rows before it). Those already sent are sent again.
		failed, err = w.publishSingles(p.rows[start : start+len(p.msgs)])
		failed += start
	}
	if err == nil {
		return true
	}
	if errors.Is(err, errAbandoned) {
		p.sent, p.msgs, p.stop = failed, nil, true
		return false
	}
	rec := &w.head[p.rows[failed]]
	w.log("Publishing a lane row failed; it is retried after backoff", err, watermill.LogFields{"row_id": rec.ID.String()})
	p.sent = failed
	p.fail = &rowFailure{rec: rec, reason: err.Error()}
	w.halt.Store(true)
	return false
}

// prepare builds the message of the head row at index i, or says why it cannot be sent.
// The message takes the row's payload rather than a copy, and its delivery is the
// row's slot of the run's deliveries (one allocation per run): takeHead drops both
// before the next read, which therefore cannot overwrite a payload a message holds.
func (w *laneWorker) prepare(i int) (*message.Message, *delivery, string) {
	msg, d, reason := w.f.prepareRow(&w.head[i], true, &w.dels[i])
	if msg != nil && w.f.direct {
		toTarget(msg, d)
	}
	return msg, d, reason
}

// publishSingles publishes the head rows at indexes rows (all of which prepare
// accepted) one Publish call each, in order, and returns the position in rows of the
// first that failed, with its error.
func (w *laneWorker) publishSingles(rows []int) (int, error) {
	for k, i := range rows {
		if !w.h.live(w.f.mono()) {
			return k, errLeaseDeadline
		}
		r := &w.head[i]
		msg, _, _ := w.prepare(i)
		returned, err := w.publish(r.Transport, r.Destination, []*message.Message{msg})
		if !returned {
			return k, errAbandoned
		}
		if err != nil {
			return k, err
		}
	}
	return len(rows), nil
}

// errAbandoned is the failure of a Publish call that had not returned when the
// shutdown deadline passed: its rows are neither deleted nor failed.
var errAbandoned = errors.New("forwarder: shutdown deadline passed while a Publish call was running")

// publish is Forwarder.publish to the target of transport.
func (w *laneWorker) publish(transport, topic string, msgs []*message.Message) (returned bool, err error) {
	return w.f.publish(w.f.targets[transport], topic, msgs)
}
