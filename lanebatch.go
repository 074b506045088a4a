package outbox

import (
	"context"
	"time"
)

// LaneBatcher is an optional capability of a Store: the head runs of many lanes read in
// one statement, in ID order across the lanes, and the runs sent from them deleted in one
// statement, each lane's rows fenced by its own lease. Where the table's rows lie in ID
// order (PostgreSQL's heap, filled as rows are written), one batch visits each page once,
// where a read per lane visits about one page per row: the rows of one lane are
// scattered among the rows of every other lane. The forwarder does not use it: two
// wirings were measured and neither was faster (benchmarks/README.md, "Lane runs read
// in id order" and "Lane rounds"); outboxtest holds its rules.
//
// Rules, on top of the Store rules:
//   - HeadLanes looks at a window: the table's first q.Window rows in ID order, whatever
//     they are (unordered, parked, of any lane), so that its cost is bounded. For each lane of q.Lanes it returns
//     the rows of that lane in the window cut as Head cuts them (at most q.LaneLimit,
//     ending before the first row not due at q.Now or holding a live claim, rows of a
//     parked key passed over with q.HoldParkedKeys), all of them appended to dst[:0] in
//     ID order, and whether the window was full (it held q.Window rows: the lanes it
//     did not reach, or cut short, may have more rows after it, which Head reads). So
//     when the window is not full, each lane's rows are exactly what Head returns for it.
//     It writes nothing.
//   - CompleteLanes deletes, in one statement, the pending rows among p.IDs whose lane is
//     the lane of one of p.Leases and whose lease is live on the database's clock (each
//     lane fenced by its own lease, as Complete with a zero Token), and reports in
//     deleted[i] (appended to deleted[:0]) how many rows of p.Leases[i].Lane it deleted.
//     A lease that is not live deletes nothing of its lane; the other lanes are not
//     affected.
type LaneBatcher interface {
	HeadLanes(ctx context.Context, q HeadLanesQuery, dst []Record) (recs []Record, full bool, err error)
	CompleteLanes(ctx context.Context, p CompleteLanesParams, deleted []int) ([]int, error)
}

// HeadLanesQuery selects the head runs of LaneBatcher.HeadLanes.
type HeadLanesQuery struct {
	Lanes     []int // distinct lane numbers (not Unordered)
	Window    int   // how many of the table's rows, in ID order, are looked at
	LaneLimit int   // at most this many rows per lane
	Now       time.Time
	// HoldParkedKeys: rows of an ordering key with an earlier parked row in their lane
	// are passed over (see Store.Head).
	HoldParkedKeys bool
}

// CompleteLanesParams parameterises LaneBatcher.CompleteLanes: the rows of several lane
// runs sent under their lanes' leases.
type CompleteLanesParams struct {
	IDs    []ID
	Leases []LaneLease // each lane listed once
}

// LaneLease is the lease token a forwarder holds a lane with.
type LaneLease struct {
	Lane  int
	Token Token
}

// Validate checks q for LaneBatcher.HeadLanes over a table of lanes lanes.
func (q HeadLanesQuery) Validate(lanes int) error {
	const op = "head lanes"
	switch {
	case q.Window < 1:
		return invalidArgument(op, "Window must be at least 1, got %d", q.Window)
	case q.LaneLimit < 1:
		return invalidArgument(op, "LaneLimit must be at least 1, got %d", q.LaneLimit)
	}
	return checkLaneSet(op, q.Lanes, lanes)
}

// Validate checks p for LaneBatcher.CompleteLanes over a table of lanes lanes: each
// lease's lane in range and listed once. A zero or stale token is not an error: it
// deletes nothing.
func (p CompleteLanesParams) Validate(lanes int) error {
	set := make([]int, len(p.Leases))
	for i := range p.Leases {
		set[i] = p.Leases[i].Lane
	}
	return checkLaneSet("complete lanes", set, lanes)
}

func checkLaneSet(op string, set []int, lanes int) error {
	seen := make(map[int]bool, len(set))
	for _, l := range set {
		if err := checkLane(op, l, lanes, false); err != nil {
			return err
		}
		if seen[l] {
			return invalidArgument(op, "lane %d listed twice", l)
		}
		seen[l] = true
	}
	return nil
}
