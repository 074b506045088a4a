package forwarder

import (
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// directCallMax bounds the messages of one Publish call of a locked batch that Run
// makes in line (see directInlineMax): fewer calls into a publisher that returns at
// once (2 cost more Go CPU per message into a no-op publisher than 4).
const directCallMax = 4

// directSpreadMax bounds the messages of one Publish call once a batch's calls run
// concurrently. Most Watermill publishers send a call's messages one after another,
// each with its own round trip (watermill-amqp with confirms, watermill-kafka's
// SendMessage per message): one message per call puts every message of the batch on
// the wire at once. Measured with the brokers section of benchmarks/ (PostgreSQL, six
// runs alternated, row locks / raw loop, medians): 1 gave RabbitMQ 0.945, Kafka 0.915,
// a batching Kafka publisher 0.86; 4 gave 0.885, 0.83 and 1.005.
const directSpreadMax = 1

// directInlineMax is how long a Publish call of a locked batch may take for the next
// call to run in the same goroutine. A publisher that returns this fast (one that
// buffers, or hands the message to a client's own goroutines) gains nothing from
// concurrent calls, which cost a goroutine, a wake-up and a wait each; after the first
// slower call (a broker's round trip) the rest of the batch's calls run concurrently.
const directInlineMax = 20 * time.Microsecond

// directStallMax is how long the calls made one after another may take before the
// batch's settle starts the rest concurrently: a call that hangs holds up only its own
// messages.
const directStallMax = 10 * time.Millisecond

// directSend is Run's publishing of a locked batch's messages straight to their target
// publishers (no router), acking or nacking each as the Handler run by Run would. One
// goroutine (send) makes calls of up to directCallMax consecutive messages of one
// transport and topic, one after another while each returns within directInlineMax;
// it records their outcomes in marks and drops their messages (so that the GC need not
// mark them while the batch finishes). The first slower call, or the settle when they
// stall (takeOver), starts the rest concurrently, each call (of up to directSpreadMax
// messages) in a goroutine of its own. Each call is taken by one of them only (take).
type directSend struct {
	f    *Forwarder
	sent []emitted
	// marks holds the outcomes of the calls send made itself, by index of sent
	// (outcomePending for the others); read once done is closed, or up to the index
	// takeOver returned.
	marks []outcome
	done  chan struct{} // closed when send returns

	mu     sync.Mutex
	next   int  // the first message of sent no call has taken yet
	inline int  // sent[:inline] went out in send's calls: outcomes marked, messages dropped
	taken  bool // the settle took over: send drops no more messages
}

func newDirectSend(f *Forwarder, sent []emitted) *directSend {
	return &directSend{f: f, sent: sent, marks: make([]outcome, len(sent)), done: make(chan struct{})}
}

// send makes the calls one after another while each returns within directInlineMax,
// then starts the rest concurrently; it closes done when it returns.
func (s *directSend) send() {
	defer close(s.done)
	for {
		start, end, ok := s.take(directCallMax)
		if !ok {
			return
		}
		t0 := time.Now()
		s.f.publishCall(s.sent[start:end], s.marks[start:end])
		slow := time.Since(t0) >= directInlineMax
		s.published(start, end)
		if slow {
			s.spread()
			return
		}
	}
}

// published drops the messages of send's call sent[start:end], whose outcomes are
// marked, unless the settle took over (it then awaits them on the messages).
func (s *directSend) published(start, end int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken {
		return
	}
	for i := start; i < end; i++ {
		s.sent[i].msg = nil
	}
	s.inline = end
}

// takeOver is the settle's, when send's calls stall or the hold time runs out: send
// drops no more messages, the calls not taken yet start concurrently, and the number
// of leading messages whose outcomes are marked (and messages dropped) is returned.
func (s *directSend) takeOver() int {
	s.mu.Lock()
	s.taken = true
	n := s.inline
	s.mu.Unlock()
	s.spread()
	return n
}

// spread starts every call not taken yet in a goroutine of its own.
func (s *directSend) spread() {
	for {
		start, end, ok := s.take(directSpreadMax)
		if !ok {
			return
		}
		go s.f.publishCall(s.sent[start:end], nil)
	}
}

// take takes the next call, sent[start:end]: consecutive rows of one transport and
// topic, up to most. A row that failed before goes alone: its next failure is its own,
// without a failed call's retry one message at a time.
func (s *directSend) take(most int) (start, end int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start = s.next
	if start >= len(s.sent) {
		return 0, 0, false
	}
	first := &s.sent[start].d.row
	end = start + 1
	for end < len(s.sent) && end-start < most && first.Attempts == 0 && s.sent[end].d.row.Attempts == 0 &&
		s.sent[end].d.row.Transport == first.Transport && s.sent[end].d.row.Destination == first.Destination {
		end++
	}
	s.next = end
	return start, end, true
}

// publishCall publishes one call's messages. When the call fails, which of them went
// out is unknown: they are published again one at a time, so that a message the target
// refuses is nacked alone (those already sent are sent again). With marks (as long as
// call) the outcomes are also recorded there.
func (f *Forwarder) publishCall(call []emitted, marks []outcome) {
	row := &call[0].d.row
	pub := f.targets[row.Transport]
	var one [1]*message.Message
	msgs := one[:]
	if len(call) > 1 {
		msgs = make([]*message.Message, len(call))
	}
	for i := range call {
		msgs[i] = call[i].msg
	}
	err := pub.Publish(row.Destination, msgs...)
	if err == nil {
		for i := range call {
			settleCall(call, marks, i, outcomeAcked)
		}
		return
	}
	if len(call) == 1 {
		f.nackDirect(call, marks, 0, err)
		return
	}
	for i := range call {
		if err := pub.Publish(row.Destination, call[i].msg); err != nil {
			f.nackDirect(call, marks, i, err)
		} else {
			settleCall(call, marks, i, outcomeAcked)
		}
	}
}

// nackDirect records err as the failure of call[i]'s message and nacks it.
func (f *Forwarder) nackDirect(call []emitted, marks []outcome, i int, err error) {
	e := &call[i]
	s := err.Error()
	e.d.err.Store(&s)
	f.logger.Error("Forwarding a message failed; it is retried after backoff", err,
		watermill.LogFields{"message_uuid": e.msg.UUID, "topic": e.d.row.Destination})
	settleCall(call, marks, i, outcomeNacked)
}

// settleCall acks or nacks call[i]'s message and records the outcome in marks, if any.
func settleCall(call []emitted, marks []outcome, i int, o outcome) {
	if marks != nil {
		marks[i] = o
	}
	if o == outcomeAcked {
		call[i].d.mark.sent.Store(true)
		call[i].msg.Ack()
	} else {
		call[i].msg.Nack()
	}
}
