package forwarder

import (
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// directCallMax bounds the messages of one Publish call of a locked batch sent by Run:
// the calls of a batch run concurrently, so that a broker that confirms each message
// (RabbitMQ, watermill-kafka's sync publisher) works on many at once, while a call
// still carries several messages to a publisher that batches them. Measured with the
// brokers section of benchmarks/ (MariaDB, one run each, ours row locks / raw loop):
// 10 gave RabbitMQ 0.60, Kafka 0.80; 2 gave 1.13, 0.84 (and more Go CPU per message
// into a no-op publisher); 4 gave 1.08, 1.20.
const directCallMax = 4

// publishDirect sends the emitted messages of a locked batch straight to their target
// publishers (Run, no router) and acks or nacks each, as the Handler run by Run would:
// consecutive messages of one transport and topic in calls of up to directCallMax, the
// calls concurrently. It returns at once; the batch's settle awaits the outcomes.
func (f *Forwarder) publishDirect(sent []emitted) {
	for start := 0; start < len(sent); {
		first := &sent[start].d.row
		end := start + 1
		// A row that failed before goes alone: its next failure is its own, without
		// a failed call's retry one message at a time.
		for end < len(sent) && end-start < directCallMax && first.Attempts == 0 && sent[end].d.row.Attempts == 0 &&
			sent[end].d.row.Transport == first.Transport && sent[end].d.row.Destination == first.Destination {
			end++
		}
		go f.publishCall(sent[start:end])
		start = end
	}
}

// publishCall publishes one call's messages. When the call fails, which of them went
// out is unknown: they are published again one at a time, so that a message the target
// refuses is nacked alone (those already sent are sent again).
func (f *Forwarder) publishCall(call []emitted) {
	row := &call[0].d.row
	pub := f.targets[row.Transport]
	msgs := make([]*message.Message, len(call))
	for i := range call {
		msgs[i] = call[i].msg
	}
	err := pub.Publish(row.Destination, msgs...)
	if err == nil {
		for i := range call {
			call[i].msg.Ack()
		}
		return
	}
	if len(call) == 1 {
		f.nackDirect(&call[0], err)
		return
	}
	for i := range call {
		if err := pub.Publish(row.Destination, call[i].msg); err != nil {
			f.nackDirect(&call[i], err)
		} else {
			call[i].msg.Ack()
		}
	}
}

// nackDirect records err as the message's failure and nacks it.
func (f *Forwarder) nackDirect(e *emitted, err error) {
	s := err.Error()
	e.d.err.Store(&s)
	f.logger.Error("Forwarding a message failed; it is retried after backoff", err,
		watermill.LogFields{"message_uuid": e.msg.UUID, "topic": e.d.row.Destination})
	e.msg.Nack()
}
