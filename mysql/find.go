package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// FindIndexName is the index FindIndexScript adds on the rows table's message_uuid.
const FindIndexName = "ix_message_uuid"

// FindIndexScript returns the DDL of the optional index on message_uuid that lets
// FindRows (outboxctl find) look a message UUID up without a time window. It is not
// part of CreateScript: it costs every publish (a 1,000-row transaction ran at 0.77 of
// its rate on MariaDB and 0.80 on Oracle MySQL with it, benchmarks/README.md), so add
// it only where finding by UUID alone is worth that. Oracle MySQL has no CREATE INDEX IF
// NOT EXISTS: run it once (a second run fails with error 1061, duplicate key name).
func FindIndexScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("CREATE INDEX %s ON %s (message_uuid);\n", quoteIdent(FindIndexName), QualifiedTable(opts, opts.OutboxTable())), nil
}

var _ outbox.Finder = (*Store)(nil)

// FindRows returns the rows q selects (see outbox.Finder). Every statement reads the
// primary key (lane, seq, id) or the message_uuid index: a UUID through the index when
// the table has one; an ordering key its lane and its lane's parked range; a window
// (with a UUID or a topic) the unordered rows' id range (lane -1, seq -1) and the lanes'
// rows whole, since no id bounds a lane's seq order (TestExplainFind).
func (s *Store) FindRows(ctx context.Context, q outbox.FindQuery) ([]outbox.Record, bool, error) {
	if err := q.Validate(); err != nil {
		return nil, false, invalid(err)
	}
	q = q.WithDefaults()
	indexed := false
	if q.MessageUUID != "" {
		var err error
		if indexed, err = s.hasFindIndex(ctx); err != nil {
			return nil, false, wrapErr("find", err)
		}
		if !indexed && !q.HasWindow() {
			return nil, false, fmt.Errorf("mysql: find: %w (mysql.FindIndexScript adds it)", outbox.ErrFindNeedsIndex)
		}
	}
	var out []outbox.Record
	for _, st := range findStatements(s.q.outboxName, s.opts.Lanes, q, indexed) {
		rows, err := queryB(ctx, s.db, st.query, st.args...)
		if err != nil {
			return nil, false, wrapErr("find", err)
		}
		if out, err = scanRecords(rows, out, len(out)+q.Limit+1); err != nil {
			return nil, false, wrapErr("find", err)
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

// findStatements builds FindRows' statements (one, or two for an ordering key).
func findStatements(table string, laneCount int, q outbox.FindQuery, indexed bool) []statement {
	var where []string
	var args []any
	lo, hi, hasHi := q.IDRange()
	window := func() {
		if q.HasWindow() {
			where = append(where, "id >= ?")
			args = append(args, lo[:])
			if hasHi {
				where = append(where, "id < ?")
				args = append(args, hi[:])
			}
		}
	}
	hint := " FORCE INDEX (PRIMARY)" // ranges of the key; a lane read whole still walks it, never a scan
	if q.MessageUUID != "" && indexed {
		hint = ""
	}
	build := func() statement {
		return statement{query: fmt.Sprintf("SELECT %s FROM %s%s WHERE %s ORDER BY id LIMIT ?", recordColumns, table, hint, strings.Join(where, " AND ")),
			args: append(args, int64(q.Limit+1))}
	}
	switch {
	case q.MessageUUID != "" && indexed:
		where = append(where, "message_uuid = ?")
		args = append(args, q.MessageUUID)
		window()
	case q.MessageUUID != "":
		return windowStatements(laneCount, window, build, "message_uuid = ?", q.MessageUUID, &where, &args)
	case q.OrderingKey != "":
		lane := lanes.Of(q.OrderingKey, laneCount)
		var sts []statement
		for _, l := range []int{lane, parkedLane(lane)} {
			where, args = []string{"lane = ?"}, []any{int64(l)}
			window()
			where = append(where, "ordering_key = ?")
			args = append(args, keyArg(q.OrderingKey))
			sts = append(sts, build())
		}
		return sts
	default:
		return windowStatements(laneCount, window, build, "destination = ?", q.Topic, &where, &args)
	}
	return []statement{build()}
}

// windowStatements builds a window's lookups: the unordered rows (pending and parked,
// seq -1) as a range of the primary key (lane, seq, id) on their ids, and the rows of
// the lanes, whose ids come third in the key after seq: those lanes are read whole (a
// lane's order is seq, which no id bounds), filtered by the window.
func windowStatements(laneCount int, window func(), build func() statement, cond string, arg any, where *[]string, args *[]any) []statement {
	*where, *args = []string{"lane IN (-1, -2) AND seq = -1"}, nil
	window()
	*where, *args = append(*where, cond), append(*args, arg)
	sts := []statement{build()}
	*where, *args = []string{"lane IN (" + orderedLanesList(laneCount) + ")"}, nil
	window()
	*where, *args = append(*where, cond), append(*args, arg)
	return append(sts, build())
}

// orderedLanesList lists every lane value a row of a lane may hold: 0..lanes-1
// (pending) and their parked values (parkedLane).
func orderedLanesList(laneCount int) string {
	var b []byte
	for l := 0; l < laneCount; l++ {
		if l > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(l), 10)
		b = strconv.AppendInt(append(b, ','), int64(parkedLane(l)), 10)
	}
	return string(b)
}

// hasFindIndex reports whether the rows table has an index led by message_uuid.
func (s *Store) hasFindIndex(ctx context.Context) (bool, error) {
	const query = `SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) ` +
		`AND TABLE_NAME = ? AND COLUMN_NAME = 'message_uuid' AND SEQ_IN_INDEX = 1`
	var schema any
	if s.opts.Schema != "" {
		schema = s.opts.Schema
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, query, schema, s.opts.OutboxTable()).Scan(&n); err != nil {
		return false, fmt.Errorf("look for the message_uuid index: %w", err)
	}
	return n > 0, nil
}

// FindInbox returns the inbox entries of messageUUID (see outbox.Finder): the consumers
// come from a loose scan of the primary key (consumer, message_uuid), one index dive
// per consumer, and each entry is a point of the key.
func (s *Store) FindInbox(ctx context.Context, messageUUID string) ([]outbox.InboxEntry, error) {
	consumers, err := s.inboxConsumers(ctx)
	if err != nil || len(consumers) == 0 {
		return nil, err
	}
	rows, err := queryB(ctx, s.db, inboxFindStatement(s.q.inbox, len(consumers)), append(consumers, []byte(messageUUID))...)
	if err != nil {
		return nil, wrapErr("find inbox", err)
	}
	defer rows.Close()
	var out []outbox.InboxEntry
	var at sql.RawBytes
	for rows.Next() {
		e := outbox.InboxEntry{MessageUUID: messageUUID}
		if err := rows.Scan(&e.Consumer, &at, &e.Duplicates); err != nil {
			return nil, wrapErr("find inbox", err)
		}
		if e.ProcessedAt, err = parseTime(at); err != nil {
			return nil, wrapErr("find inbox", err)
		}
		out = append(out, e)
	}
	return out, wrapErr("find inbox", rows.Err())
}

// inboxConsumersStatement lists the consumers (a loose index scan of the primary key).
func inboxConsumersStatement(inbox string) string {
	return "SELECT DISTINCT consumer FROM " + inbox
}

// inboxFindStatement reads the entries of n consumers (parameters) and one UUID.
func inboxFindStatement(inbox string, n int) string {
	return "SELECT consumer, CAST(processed_at AS CHAR), duplicates FROM " + inbox +
		" WHERE consumer IN (?" + strings.Repeat(", ?", n-1) + ") AND message_uuid = ? ORDER BY consumer"
}

func (s *Store) inboxConsumers(ctx context.Context) ([]any, error) {
	rows, err := queryB(ctx, s.db, inboxConsumersStatement(s.q.inbox))
	if err != nil {
		return nil, wrapErr("find inbox", err)
	}
	defer rows.Close()
	var out []any
	for rows.Next() {
		var c []byte
		if err := rows.Scan(&c); err != nil {
			return nil, wrapErr("find inbox", err)
		}
		out = append(out, c)
	}
	return out, wrapErr("find inbox", rows.Err())
}

// LockedRows returns which of the unordered rows ids another transaction holds locked
// (see outbox.Finder): a locking read with SKIP LOCKED and a plain read of the same
// primary key points, at READ COMMITTED (no gap locks), rolled back at once.
func (s *Store) LockedRows(ctx context.Context, ids []outbox.ID) ([]outbox.ID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, wrapErr("find: probe row locks", err)
	}
	defer func() { _ = tx.Rollback() }()
	freeQ, presentQ := lockedRowsStatements(s.q.outboxName, ids)
	free, err := idSet(ctx, tx, freeQ)
	if err != nil {
		return nil, wrapErr("find: probe row locks", err)
	}
	present, err := idSet(ctx, tx, presentQ)
	if err != nil {
		return nil, wrapErr("find: probe row locks", err)
	}
	var locked []outbox.ID
	for _, id := range ids {
		if present[id] && !free[id] {
			locked = append(locked, id)
		}
	}
	return locked, nil
}

// lockedRowsStatements are LockedRows' reads of ids (points of the primary key): the
// rows it can lock, and the rows that exist.
func lockedRowsStatements(table string, ids []outbox.ID) (free, present string) {
	where := " WHERE lane = -1 AND seq = -1 AND id IN (" + string(appendIDList(nil, ids)) + ")"
	// FORCE INDEX: ix_seq holds the whole key too, and an unordered row (seq -1) would
	// otherwise be looked up twice.
	return "SELECT id FROM " + table + " FORCE INDEX (PRIMARY)" + where + " FOR UPDATE SKIP LOCKED", "SELECT id FROM " + table + " FORCE INDEX (PRIMARY)" + where
}

// idSet runs q (selecting one id column) and returns the ids.
func idSet(ctx context.Context, tx *sql.Tx, q string) (map[outbox.ID]bool, error) {
	rows, err := tx.QueryContext(ctx, q)
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
