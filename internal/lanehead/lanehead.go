// Package lanehead cuts the head run of a lane out of the rows a dialect read, the same
// way for every dialect (outbox.Store.Head).
package lanehead

import (
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Keep filters recs[mark:] (pending rows of one lane in lane order, Seq, just read) in
// place and returns the new length of recs: rows of a parked key (a parked row of the
// same ordering key with a smaller Seq in parked) are passed over, and the run ends (stop) at the first row
// that is not due at now or holds a live claim, or once limit rows are kept. Records are
// swapped, never copied, so each keeps its own buffers.
func Keep(recs []outbox.Record, mark int, parked map[string]int64, now time.Time, limit int) (n int, stop bool) {
	n = mark
	for i := mark; i < len(recs); i++ {
		r := &recs[i]
		if held, ok := parked[r.OrderingKey]; ok && r.OrderingKey != "" && held < r.Seq {
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

// Pager appends to dst up to limit pending rows of the lane being read with a Seq above
// after, in Seq order (one statement of the dialect).
type Pager func(dst []outbox.Record, after int64, limit int) ([]outbox.Record, error)

// Read is the body of every dialect's Store.Head: pages of the lane's pending rows read
// with page (Limit rows first; larger pages only when parked keys held rows of the last
// one), cut by Keep at now. dst's storage is reused; on an error the rows kept so far
// are returned with it.
func Read(dst []outbox.Record, limit int, parked map[string]int64, now time.Time, page Pager) ([]outbox.Record, error) {
	out := dst[:0]
	size := limit
	var after int64
	for first := true; ; first = false {
		if !first {
			size = min(size*2, max(limit, 1024))
		}
		mark := len(out)
		var err error
		if out, err = page(out, after, size); err != nil {
			return out[:mark], err
		}
		read := len(out) - mark
		if read > 0 {
			after = out[len(out)-1].Seq
		}
		n, stop := Keep(out, mark, parked, now, limit)
		out = out[:n]
		if stop || read < size {
			return out, nil
		}
	}
}
