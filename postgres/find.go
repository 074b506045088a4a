package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// suffixUUIDIx names FindIndexScript's index (shorter than the longest generated name,
// so it does not bound the prefix).
const suffixUUIDIx = "outbox_uuid_ix"

// FindIndexScript returns the DDL of the optional index on message_uuid that lets
// FindRows (outboxctl find) look a message UUID up without a time window. It is not
// part of CreateScript: it costs every publish (a 1,000-row transaction ran at 0.69 of
// its rate with it, benchmarks/README.md), so add it only where finding by UUID alone
// is worth that. CREATE INDEX CONCURRENTLY does not block writers; it cannot run inside
// a transaction block.
func FindIndexScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (message_uuid);\n",
		quoteIdent(opts.TablePrefix+suffixUUIDIx), newNames(opts).outbox), nil
}

var _ outbox.Finder = (*Store)(nil)

// FindRows returns the rows q selects (see outbox.Finder). Every statement reads an
// index: a UUID the message_uuid index when the table has one, else the primary key
// over its window; an ordering key the lane index (pending rows) and the parked rows'
// key index; a window with a topic the primary key over the window.
func (s *Store) FindRows(ctx context.Context, q outbox.FindQuery) ([]outbox.Record, bool, error) {
	if err := q.Validate(); err != nil {
		return nil, false, invalid(err)
	}
	q = q.WithDefaults()
	indexed := false
	if q.MessageUUID != "" {
		var err error
		if indexed, err = s.hasFindIndex(ctx); err != nil {
			return nil, false, wrap("find", err)
		}
		if !indexed && !q.HasWindow() {
			return nil, false, fmt.Errorf("postgres: find: %w (postgres.FindIndexScript adds it)", outbox.ErrFindNeedsIndex)
		}
	}
	var out []outbox.Record
	sc := s.scanner()
	defer s.scanners.Put(sc)
	for _, st := range findStatements(s.q.n.outbox, s.opts.Lanes, q) {
		rows, err := s.db.QueryContext(ctx, st.query, st.args...)
		if err != nil {
			return nil, false, wrap("find", err)
		}
		for rows.Next() {
			out = append(out, outbox.Record{})
			if err := sc.scan(rows, &out[len(out)-1]); err != nil {
				rows.Close()
				return nil, false, wrap("find", err)
			}
		}
		if err := sqlrows.Close(rows); err != nil {
			return nil, false, wrap("find", err)
		}
	}
	slices.SortFunc(out, func(a, b outbox.Record) int { return a.ID.Compare(b.ID) })
	more := len(out) > q.Limit
	out = out[:min(len(out), q.Limit)]
	for i := range out {
		out[i].Body = nil
	}
	return out, more, nil
}

type statement struct {
	query string
	args  []any
}

// findStatements builds FindRows' statements (one, or two for an ordering key: its
// pending rows and its parked rows, each on its own index).
func findStatements(table string, laneCount int, q outbox.FindQuery) []statement {
	lo, hi, hasHi := q.IDRange()
	build := func(where string, args ...any) statement {
		if q.HasWindow() {
			args = append(args, lo[:])
			where += " AND id >= $" + strconv.Itoa(len(args))
			if hasHi {
				args = append(args, hi[:])
				where += " AND id < $" + strconv.Itoa(len(args))
			}
		}
		args = append(args, q.Limit+1)
		return statement{query: "SELECT " + selectColumns + " FROM " + table + " WHERE " + where +
			" ORDER BY id LIMIT $" + strconv.Itoa(len(args)), args: args}
	}
	switch {
	case q.MessageUUID != "":
		// The message_uuid index, or (without it) the primary key over the window with
		// message_uuid filtered on the way.
		return []statement{build("message_uuid = $1", q.MessageUUID)}
	case q.OrderingKey != "":
		lane := lanes.Of(q.OrderingKey, laneCount)
		return []statement{
			build("status = 'pending' AND lane IS NOT NULL AND lane = $1 AND ordering_key = $2", lane, q.OrderingKey),
			build("status = 'parked' AND ordering_key = $1", q.OrderingKey),
		}
	default:
		return []statement{build("destination = $1", q.Topic)}
	}
}

// hasFindIndex reports whether the rows table has an index led by message_uuid.
func (s *Store) hasFindIndex(ctx context.Context) (bool, error) {
	const query = `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] ` +
		`WHERE i.indrelid = to_regclass($1) AND a.attname = 'message_uuid' AND i.indisvalid)`
	var ok bool
	if err := s.db.QueryRowContext(ctx, query, s.q.n.outbox).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for the message_uuid index: %w", err)
	}
	return ok, nil
}

// inboxFindStatement reads the entries of one UUID ($1): the consumers come from a
// loose scan of the primary key (consumer, message_uuid), one index probe per
// consumer, and each entry is a point of the key.
func inboxFindStatement(inbox string) string {
	return `WITH RECURSIVE c(consumer) AS (
    (SELECT consumer FROM ` + inbox + ` ORDER BY consumer LIMIT 1)
    UNION ALL
    SELECT (SELECT i.consumer FROM ` + inbox + ` AS i WHERE i.consumer > c.consumer ORDER BY i.consumer LIMIT 1)
    FROM c WHERE c.consumer IS NOT NULL
)
SELECT e.consumer, e.processed_at, e.duplicates FROM c JOIN ` + inbox + ` AS e ON e.consumer = c.consumer AND e.message_uuid = $1 ORDER BY e.consumer`
}

// FindInbox returns the inbox entries of messageUUID (see outbox.Finder).
func (s *Store) FindInbox(ctx context.Context, messageUUID string) ([]outbox.InboxEntry, error) {
	rows, err := s.db.QueryContext(ctx, inboxFindStatement(s.q.n.inbox), messageUUID)
	if err != nil {
		return nil, wrap("find inbox", err)
	}
	defer rows.Close()
	var out []outbox.InboxEntry
	for rows.Next() {
		e := outbox.InboxEntry{MessageUUID: messageUUID}
		var at sql.NullTime
		if err := rows.Scan(&e.Consumer, &at, &e.Duplicates); err != nil {
			return nil, wrap("find inbox", err)
		}
		e.ProcessedAt = at.Time.UTC()
		out = append(out, e)
	}
	return out, wrap("find inbox", rows.Err())
}

// LockedRows returns which of the unordered rows ids another transaction holds locked
// (see outbox.Finder): a locking read with SKIP LOCKED and a plain read of the same
// primary key values, in a transaction rolled back at once.
func (s *Store) LockedRows(ctx context.Context, ids []outbox.ID) ([]outbox.ID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg := make([][]byte, len(ids))
	for i := range ids {
		arg[i] = ids[i][:]
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, wrap("find: probe row locks", err)
	}
	defer func() { _ = tx.Rollback() }()
	freeQ, presentQ := lockedRowsStatements(s.q.n.outbox)
	free, err := idSet(ctx, tx, freeQ, arg)
	if err != nil {
		return nil, wrap("find: probe row locks", err)
	}
	present, err := idSet(ctx, tx, presentQ, arg)
	if err != nil {
		return nil, wrap("find: probe row locks", err)
	}
	var locked []outbox.ID
	for _, id := range ids {
		if present[id] && !free[id] {
			locked = append(locked, id)
		}
	}
	return locked, nil
}

// lockedRowsStatements are LockedRows' reads of the ids in $1 (points of the primary
// key): the rows it can lock, and the rows that exist.
func lockedRowsStatements(table string) (free, present string) {
	where := " WHERE lane IS NULL AND id = ANY($1::bytea[])"
	return "SELECT id FROM " + table + where + " FOR UPDATE SKIP LOCKED", "SELECT id FROM " + table + where
}

// idSet runs q (selecting one id column) and returns the ids.
func idSet(ctx context.Context, tx *sql.Tx, q string, args ...any) (map[outbox.ID]bool, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	set := map[outbox.ID]bool{}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		var id outbox.ID
		copy(id[:], b)
		set[id] = true
	}
	return set, rows.Err()
}
