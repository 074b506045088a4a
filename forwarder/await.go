package forwarder

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// outcome is what await (or peek) saw happen to an emitted message.
type outcome int

const (
	// outcomePending: the message is neither acked nor nacked yet (peek only).
	outcomePending outcome = iota
	// outcomeAcked: the handler acked the message, and published it (ackedOutcome).
	outcomeAcked
	// outcomeNacked: the handler nacked the message.
	outcomeNacked
	// outcomeTicked: the tick channel fired first (a renewal is due, or a hold time ran
	// out); the caller does its periodic work and, as a rule, awaits again.
	outcomeTicked
	// outcomeStopped: a stop channel fired first (shutdown, a lost lease); the message's
	// outcome is left to its claim.
	outcomeStopped
)

// await waits until msg is acked or nacked, tick fires, or one of stop (at most two) is
// closed, and says which came first. A nil tick or stop channel never fires. It is the
// one select of the goroutines that hand messages to the router and wait for them
// (token claimers, locked batches, rows handed over to a claim, lane workers); one that renews claims while it waits loops while it returns
// outcomeTicked:
//
//	for {
//		switch await(msg, tick, stop) {
//		case outcomeTicked:
//			renew()
//			continue
//		case outcomeAcked:
//			...
//		}
//		break
//	}
//
// When several are ready at once, which one await reports is random (as in select).
func await(msg *message.Message, tick <-chan time.Time, stop ...<-chan struct{}) outcome {
	var stop0, stop1 <-chan struct{}
	switch len(stop) {
	case 0:
	case 1:
		stop0 = stop[0]
	case 2:
		stop0, stop1 = stop[0], stop[1]
	default:
		panic("forwarder: await takes at most two stop channels")
	}
	select {
	case <-msg.Acked():
		return ackedOutcome(msg) // outcomeNacked for an ack without a publish
	case <-msg.Nacked():
		return outcomeNacked
	case <-tick:
		return outcomeTicked
	case <-stop0:
		return outcomeStopped
	case <-stop1:
		return outcomeStopped
	}
}

// peek reports outcomeAcked or outcomeNacked when msg already has its outcome, and
// outcomePending otherwise; it never waits.
func peek(msg *message.Message) outcome {
	select {
	case <-msg.Acked():
		return ackedOutcome(msg) // outcomeNacked for an ack without a publish
	case <-msg.Nacked():
		return outcomeNacked
	default:
		return outcomePending
	}
}
