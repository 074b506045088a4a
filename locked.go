package outbox

import (
	"context"
	"time"
)

// BatchLocker is an optional capability of a Store: it claims unordered rows by holding
// their row locks in an open transaction instead of writing a claim token, the way a
// hand-written SKIP LOCKED loop drains a queue. It saves the claim UPDATE of every row,
// at the price of one open transaction (and pooled connection) per batch while the batch
// is being sent. Forwarders use it when configured to and when the store implements it.
//
// Rules, on top of the Store rules:
//   - LockBatch takes up to p.Limit eligible unordered rows with IDs above p.After in
//     ID order, skipping rows another transaction holds (and rows with a live claim),
//     and locks them until the batch is finished or rolled back. Two open batches never hold the same row, and
//     Claim never returns a row an open batch holds.
//   - A batch that is rolled back, or whose connection or process dies, leaves its rows
//     exactly as they were: eligible again at once, attempts unchanged.
type BatchLocker interface {
	LockBatch(ctx context.Context, p LockParams) (LockedBatch, error)
}

// ClaimersHint is an optional capability of a BatchLocker: the number of concurrent
// claim loops its engine drains fastest with, as measured. A forwarder whose
// Config.Claimers is zero uses it for row locks (not for token claims).
type ClaimersHint interface {
	ClaimersHint() int
}

// LockParams parameterises BatchLocker.LockBatch.
type LockParams struct {
	Limit int       // at most this many rows; below 1 locks nothing
	Now   time.Time // eligibility instant (due, no live claim)
	After ID        // exclusive ID cursor, as ClaimParams.After; zero locks from the start
	// Dst is where the records go: they are appended to Dst[:0], as Claim's dst, so
	// that a caller that locks batch after batch reuses one array. The caller must be
	// done with the records Dst held, their Headers and Body included (a store may
	// reuse those buffers too). Nil allocates an array for the batch.
	Dst []Record
}

// FinishParams parameterises LockedBatch.Finish.
type FinishParams struct {
	Done   []ID         // delivered: deleted
	Failed []FailParams // failed attempts
	// Claim hands rows still in flight over to an ordinary claim: a sender that must not
	// hold the batch's locks any longer (a slow message) commits the rest of the batch
	// and renews, completes or fails these rows through the Store with Token. Token must
	// be non-zero and Until set when Claim is not empty.
	Claim []ID
	Token Token
	Until time.Time
}

// LockedBatch is an open transaction holding the locks of some unordered rows.
// It is not safe for concurrent use.
type LockedBatch interface {
	// Records returns the locked rows in ID order (Record.Corrupt set as by Read). The
	// records and their Headers and Body belong to the caller: the batch never reuses,
	// changes or reads them again (Finish works on the rows as locked), so the caller
	// may change or clear them.
	Records() []Record
	// Finish deletes the rows listed in p.Done, records the failures of p.Failed
	// (attempts+1, error text, DeliverAt moved to RetryAt when after the failure's Now,
	// parked when Park is set; Token, Lane and Lease are ignored), gives the rows of
	// p.Claim an ordinary claim (p.Token until p.Until), and commits. Rows of the batch
	// named in no list are left unchanged. IDs outside the batch are ignored. A failed
	// Finish rolls back: nothing of it happened.
	Finish(ctx context.Context, p FinishParams) error
	// Rollback releases the locks, changing nothing. It is safe after Finish.
	Rollback() error
}
