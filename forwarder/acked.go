package forwarder

import (
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// ackGuard keeps an ack from deleting a row whose message was not published: a router
// middleware around the forwarder's handler may turn the handler's failure into an ack
// (PoisonQueue, an error-swallowing middleware) or ack without calling the handler. Once
// Handler has been made (AddToRouter, Run), an ack counts only for a message that the
// handler, or Run itself, published; any other ack is a failed send (backoff, attempts,
// parking), logged once per kind.
type ackGuard struct {
	made        sync.Once               // the first Handler call sets logger, then handlerMade
	handlerMade atomic.Bool             // Handler was called: acks must come with a publish
	logger      watermill.LoggerAdapter // set before handlerMade
	swallowed   sync.Once               // logged: an ack after the handler's publish failed
	skipped     sync.Once               // logged: an ack without the handler publishing
}

// sendMark is what a delivery knows about its message's publish.
type sendMark struct {
	guard *ackGuard   // the forwarder's; nil: acks are trusted (no forwarder made it)
	sent  atomic.Bool // the forwarder's handler (or Run) published the message
	// overridden: acked without a publish, counted as a failure (failure's reason).
	overridden atomic.Bool
}

// ackedOutcome is what an acked message means for its row: outcomeAcked when its
// publish is known to have succeeded (or the forwarder's handler is not in use, and
// a custom handler's ack is trusted), outcomeNacked otherwise.
func ackedOutcome(msg *message.Message) outcome {
	d := deliveryFrom(msg.Context())
	if d == nil || d.mark.guard == nil || d.mark.sent.Load() || !d.mark.guard.handlerMade.Load() {
		return outcomeAcked
	}
	d.mark.overridden.Store(true)
	g := d.mark.guard
	logger := g.logger
	fields := watermill.LogFields{"message_uuid": msg.UUID, "row_id": d.row.ID.String(), "topic": d.row.Destination}
	if d.err.Load() != nil {
		g.swallowed.Do(func() {
			logger.Error("A router middleware acked a message whose publish failed (PoisonQueue, or a middleware returning nil for the handler's error): "+
				"the forwarder keeps the row and retries it with backoff, counts the attempt and parks it after MaxAttempts, as without the middleware; "+
				"keep such middleware off the forwarder's handler (logged once)", nil, fields)
		})
	} else {
		g.skipped.Do(func() {
			logger.Error("A router middleware acked a message without the forwarder's handler publishing it (the handler was not called): "+
				"the forwarder keeps the row and retries it as a failed send (logged once)", nil, fields)
		})
	}
	return outcomeNacked
}

// overriddenReason is the row's last_error for an ack without a publish and without a
// publish error.
const overriddenReason = "forwarder: acked by a router middleware without the forwarder's handler publishing the message"

// handlerIsMade records that the forwarder's Handler is in use (the first call only).
func (g *ackGuard) handlerIsMade(logger watermill.LoggerAdapter) {
	g.made.Do(func() {
		g.logger = logger
		g.handlerMade.Store(true)
	})
}
