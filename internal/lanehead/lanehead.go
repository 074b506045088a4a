// Package lanehead cuts the head run of a lane out of the rows a dialect read, the same
// way for every dialect (outbox.Store.Head).
package lanehead

import (
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Keep filters recs[mark:] (pending rows of one lane in id order, just read) in place
// and returns the new length of recs: rows of a parked key (an earlier parked row of the
// same ordering key in parked) are passed over, and the run ends (stop) at the first row
// that is not due at now or holds a live claim, or once limit rows are kept. Records are
// swapped, never copied, so each keeps its own buffers.
func Keep(recs []outbox.Record, mark int, parked map[string]outbox.ID, now time.Time, limit int) (n int, stop bool) {
	n = mark
	for i := mark; i < len(recs); i++ {
		r := &recs[i]
		if held, ok := parked[r.OrderingKey]; ok && r.OrderingKey != "" && held.Compare(r.ID) < 0 {
			continue // its key is parked: neither returned nor holding the lane
		}
		if r.DeliverAt.After(now) || r.ClaimExpiresAt.After(now) {
			return n, true // not due, or claimed: holds the lane
		}
		if n == limit {
			return n, true
		}
		if i != n {
			recs[n], recs[i] = recs[i], recs[n]
		}
		n++
	}
	return n, n == limit
}
