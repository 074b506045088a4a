package postgres

import (
	"context"
	"database/sql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/lanehead"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
)

var _ outbox.LaneBatcher = (*Store)(nil)

// HeadLanes reads the window's rows of q.Lanes in one statement, walking the pending lane
// rows in id order (the heap's order), and cuts each lane's run as Head does (see
// outbox.LaneBatcher).
func (s *Store) HeadLanes(ctx context.Context, q outbox.HeadLanesQuery, dst []outbox.Record) ([]outbox.Record, bool, error) {
	dst = dst[:0]
	if err := q.Validate(s.opts.Lanes); err != nil {
		return dst, false, invalid(err)
	}
	if len(q.Lanes) == 0 {
		return dst, false, ctx.Err()
	}
	lanes := laneArgs(q.Lanes)
	var parked map[lanehead.LaneKey]outbox.ID
	if q.HoldParkedKeys {
		var err error
		if parked, err = s.parkedKeysOf(ctx, lanes); err != nil {
			return dst, false, wrap("head lanes", err)
		}
	}
	rows, err := s.db.QueryContext(ctx, s.q.headLanes, lanes, q.Window)
	if err != nil {
		return dst, false, wrap("head lanes", err)
	}
	sc := s.scanner()
	defer s.scanners.Put(sc)
	var window int64
	dst, err = sqlrows.Append(rows, dst, q.Window, func(rows *sql.Rows, r *outbox.Record) error {
		return sc.scanCounted(rows, r, &window)
	})
	if err != nil {
		return dst[:0], false, wrap("head lanes", err)
	}
	return lanehead.KeepLanes(dst, parked, q.Now, q.LaneLimit), window >= int64(q.Window), nil
}

// parkedKeysOf returns, per lane and ordering key of lanes, the smallest parked id.
func (s *Store) parkedKeysOf(ctx context.Context, lanes []int32) (map[lanehead.LaneKey]outbox.ID, error) {
	rows, err := s.db.QueryContext(ctx, s.q.parkedKeysLanes, lanes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := make(map[lanehead.LaneKey]outbox.ID)
	var raw sql.RawBytes
	for rows.Next() {
		var k lanehead.LaneKey
		if err := rows.Scan(&k.Lane, &k.Key, &raw); err != nil {
			return nil, err
		}
		var id outbox.ID
		copy(id[:], raw)
		m[k] = id
	}
	return m, rows.Err()
}

// CompleteLanes deletes the runs' rows in one statement, each lane fenced by its lease,
// and counts the deleted rows per lease (see outbox.LaneBatcher).
func (s *Store) CompleteLanes(ctx context.Context, p outbox.CompleteLanesParams, deleted []int) ([]int, error) {
	deleted = deleted[:0]
	if err := p.Validate(s.opts.Lanes); err != nil {
		return deleted, invalid(err)
	}
	at := make(map[int]int, len(p.Leases)) // lane → its index in p.Leases
	lanes := make([]int32, 0, len(p.Leases))
	tokens := make([][]byte, 0, len(p.Leases))
	for i, l := range p.Leases {
		deleted = append(deleted, 0)
		at[l.Lane] = i
		if !l.Token.IsZero() {
			lanes = append(lanes, int32(l.Lane))
			tokens = append(tokens, l.Token[:])
		}
	}
	if len(p.IDs) == 0 || len(lanes) == 0 {
		return deleted, ctx.Err()
	}
	rows, err := s.db.QueryContext(ctx, s.q.completeLanes, idArgs(p.IDs), lanes, tokens)
	if err != nil {
		return deleted, wrap("complete lanes", err)
	}
	defer rows.Close()
	for rows.Next() {
		var lane int
		if err := rows.Scan(&lane); err != nil {
			return deleted, wrap("complete lanes", err)
		}
		deleted[at[lane]]++
	}
	return deleted, wrap("complete lanes", rows.Err())
}

func laneArgs(lanes []int) []int32 {
	out := make([]int32, len(lanes))
	for i, l := range lanes {
		out[i] = int32(l)
	}
	return out
}
