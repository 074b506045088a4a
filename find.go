package outbox

import (
	"context"
	"fmt"
	"time"
)

// FindLimitDefault is the number of rows Find returns when FindQuery.Limit is zero.
const FindLimitDefault = 100

// FindQuery selects outbox rows for Find: by MessageUUID, by OrderingKey, or by a
// time window (From, To) with a Topic. A MessageUUID may take a window too, which
// bounds its search to a range of the primary key (the way to find a UUID on a table
// without the message_uuid index).
type FindQuery struct {
	// MessageUUID is the Watermill message UUID.
	MessageUUID string
	// OrderingKey selects the rows of one ordering key (pending and parked).
	OrderingKey string
	// Topic is the destination topic; required with a window and no UUID.
	Topic string
	// From and To bound the rows' creation time, From inclusive and To exclusive, to the
	// millisecond of the row id (a ULID made by the writer when it published: its clock,
	// which is also what stamps created_at). Zero From: from the start; zero To: no end.
	From, To time.Time
	// Limit bounds the rows returned. Defaults to FindLimitDefault.
	Limit int
}

// Validate checks that q names exactly one selector: a MessageUUID, an OrderingKey, or
// a window with a Topic.
func (q FindQuery) Validate() error {
	window := !q.From.IsZero() || !q.To.IsZero()
	switch {
	case q.Limit < 0:
		return invalidArgument("find", "Limit must not be negative, got %d", q.Limit)
	case q.MessageUUID != "" && q.OrderingKey != "":
		return invalidArgument("find", "give a message UUID or an ordering key, not both")
	case q.MessageUUID == "" && q.OrderingKey == "" && (!window || q.Topic == ""):
		return invalidArgument("find", "give a message UUID, an ordering key, or a time window with a topic")
	case !q.From.IsZero() && !q.To.IsZero() && !q.To.After(q.From):
		return invalidArgument("find", "the window ends (%s) before it starts (%s)", q.To.Format(time.RFC3339Nano), q.From.Format(time.RFC3339Nano))
	}
	return nil
}

// WithDefaults returns q with a zero Limit set to FindLimitDefault.
func (q FindQuery) WithDefaults() FindQuery {
	if q.Limit == 0 {
		q.Limit = FindLimitDefault
	}
	return q
}

// IDRange returns the id range of q's window: ids >= lo and, when hasHi, < hi.
func (q FindQuery) IDRange() (lo, hi ID, hasHi bool) {
	if !q.From.IsZero() {
		lo = IDFromTime(q.From)
	}
	if !q.To.IsZero() {
		to := q.To
		if to.Truncate(time.Millisecond) != to {
			to = to.Truncate(time.Millisecond).Add(time.Millisecond) // a ULID holds milliseconds
		}
		return lo, IDFromTime(to), true
	}
	return lo, ID{}, false
}

// HasWindow reports whether q bounds the creation time.
func (q FindQuery) HasWindow() bool { return !q.From.IsZero() || !q.To.IsZero() }

// InboxEntry is one consumer's inbox entry for a message UUID.
type InboxEntry struct {
	Consumer    string
	MessageUUID string
	ProcessedAt time.Time // when the consumer first processed the message
	Duplicates  int64     // deliveries skipped since as already applied
}

// Finder is an optional store capability (outboxctl find, Find): look rows and inbox
// entries up with an index, never a scan of a table.
type Finder interface {
	// FindRows returns up to q.Limit rows (pending or parked; q with defaults) matching q
	// in id order, and whether more matched. Headers are returned, Body is not (nil).
	// A UUID without a window on a table without an index on message_uuid fails with
	// ErrFindNeedsIndex.
	FindRows(ctx context.Context, q FindQuery) ([]Record, bool, error)
	// FindInbox returns the inbox entries of messageUUID, one per consumer that recorded
	// it, ordered by consumer.
	FindInbox(ctx context.Context, messageUUID string) ([]InboxEntry, error)
	// LockedRows returns which of the unordered rows ids another transaction holds
	// locked (a forwarder's open batch: BatchLocker), by trying to lock them with SKIP
	// LOCKED (or READPAST) in a transaction it rolls back at once; rows gone meanwhile
	// are not listed. It waits for no lock, and holds the rows it could lock only for
	// that instant (a forwarder claiming then skips them once).
	LockedRows(ctx context.Context, ids []ID) ([]ID, error)
}

// RowState says where an outbox row stands at a given instant.
type RowState string

const (
	// RowPending rows are due and wait for a forwarder.
	RowPending RowState = "pending"
	// RowScheduled rows are due later (DeliverAt after now): scheduled, or a failed
	// row waiting for its retry.
	RowScheduled RowState = "scheduled"
	// RowClaimed rows are in flight under a live claim token (ClaimToken until
	// ClaimExpiresAt).
	RowClaimed RowState = "claimed"
	// RowLocked rows are in flight in a forwarder's open batch: unordered rows held by
	// a transaction's row lock (row-lock claims, the forwarder's default for unordered
	// rows), found by Finder.LockedRows.
	RowLocked RowState = "locked"
	// RowParked rows were set aside after failures (LastError, Attempts); they stay until
	// requeued or purged.
	RowParked RowState = "parked"
)

// FoundRow is one outbox row Find matched.
type FoundRow struct {
	Record
	State RowState
	// Lease is the lease of the row's lane (ordered rows only; nil when the lane has no
	// lease row). A live lease names the forwarder that sends the lane's rows in order:
	// a pending row of the lane is in flight under it once it reaches the head.
	Lease *Lease
}

// NotInOutboxExplanation is what Find says of a message UUID with no row.
const NotInOutboxExplanation = "not in the outbox: the message was sent (a delivered row is deleted) " +
	"or never committed (a rolled-back transaction leaves no row). The two cannot be told apart from the " +
	"database: the outbox keeps no trace of a sent row, and an aborted transaction wrote none. An inbox " +
	"entry below means a consumer received it, so it was sent."

// FindResult is what Find reports.
type FindResult struct {
	Query FindQuery
	Now   time.Time
	Rows  []FoundRow
	// More is set when more rows matched than Query.Limit.
	More bool
	// Inbox lists the inbox entries of Query.MessageUUID (empty for other queries).
	Inbox []InboxEntry
	// NotInOutbox is NotInOutboxExplanation for a UUID query that matched no row, "" otherwise.
	NotInOutbox string
}

// Find looks messages up in store's outbox and inbox tables (store must implement
// Finder): per matching row its state at now (pending, scheduled for DeliverAt,
// claimed under which token, locked in a forwarder's open batch, parked with its error
// and attempts) and, for ordered rows, its lane's lease; for a message UUID, each consumer whose inbox holds it (when
// first processed, duplicates skipped), and NotInOutbox when no row matched.
func Find(ctx context.Context, store Store, q FindQuery, now time.Time) (FindResult, error) {
	f, ok := store.(Finder)
	if !ok {
		return FindResult{}, fmt.Errorf("%w: %T", ErrFindUnsupported, store)
	}
	if err := q.Validate(); err != nil {
		return FindResult{}, err
	}
	q = q.WithDefaults()
	res := FindResult{Query: q, Now: now}
	recs, more, err := f.FindRows(ctx, q)
	if err != nil {
		return res, fmt.Errorf("outbox: find rows: %w", err)
	}
	res.More = more
	leases, err := lanesLeases(ctx, store, recs)
	if err != nil {
		return res, err
	}
	for _, r := range recs {
		fr := FoundRow{Record: r, State: StateAt(&r, now)}
		if l, ok := leases[r.Lane]; ok && r.Lane != Unordered {
			fr.Lease = &l
		}
		res.Rows = append(res.Rows, fr)
	}
	if err := markLocked(ctx, f, res.Rows); err != nil {
		return res, err
	}
	if q.MessageUUID == "" {
		return res, nil
	}
	if len(res.Rows) == 0 {
		res.NotInOutbox = NotInOutboxExplanation
	}
	if res.Inbox, err = f.FindInbox(ctx, q.MessageUUID); err != nil {
		return res, fmt.Errorf("outbox: find inbox entries: %w", err)
	}
	return res, nil
}

// markLocked sets RowLocked on the pending unordered rows a transaction holds locked.
func markLocked(ctx context.Context, f Finder, rows []FoundRow) error {
	var ids []ID
	for i := range rows {
		if rows[i].State == RowPending && rows[i].Lane == Unordered {
			ids = append(ids, rows[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	locked, err := f.LockedRows(ctx, ids)
	if err != nil {
		return fmt.Errorf("outbox: find: probe row locks: %w", err)
	}
	for i := range rows {
		for _, id := range locked {
			if rows[i].ID == id {
				rows[i].State = RowLocked
			}
		}
	}
	return nil
}

// lanesLeases reads the lease table when recs hold an ordered row.
func lanesLeases(ctx context.Context, store Store, recs []Record) (map[int]Lease, error) {
	for _, r := range recs {
		if r.Lane == Unordered {
			continue
		}
		list, err := store.Leases(ctx)
		if err != nil {
			return nil, fmt.Errorf("outbox: find: read lane leases: %w", err)
		}
		m := make(map[int]Lease, len(list))
		for _, l := range list {
			m[l.Lane] = l
		}
		return m, nil
	}
	return nil, nil
}

// StateAt returns r's state at now.
func StateAt(r *Record, now time.Time) RowState {
	switch {
	case r.Status == StatusParked:
		return RowParked
	case !r.ClaimToken.IsZero() && r.ClaimExpiresAt.After(now):
		return RowClaimed
	case r.DeliverAt.After(now):
		return RowScheduled
	default:
		return RowPending
	}
}
