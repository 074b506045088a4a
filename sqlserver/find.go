package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// FindIndexColumn is the computed column FindIndexScript adds (message_uuid is
// nvarchar(max), which no index key can hold), and FindIndexSuffix names its index
// after the table prefix.
const (
	FindIndexColumn = "message_uuid_key"
	FindIndexSuffix = "outbox_uuid_ix"
)

// FindIndexScript returns the DDL of the optional index that lets FindRows (outboxctl
// find) look a message UUID up without a time window: a computed column holding the
// first 400 characters of message_uuid and an index on it (FindRows compares the whole
// UUID byte for byte after the seek). It is not part of CreateScript: an index costs
// every publish (0.69-0.80 of a 1,000-row transaction's rate on PostgreSQL and MySQL,
// benchmarks/README.md). It can run any number of times.
func FindIndexScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	n := newNames(opts)
	t := quoteIdent(n.schema) + "." + quoteIdent(n.outbox)
	ix := opts.TablePrefix + FindIndexSuffix
	return "IF COL_LENGTH(" + quoteString(t) + ", " + quoteString(FindIndexColumn) + ") IS NULL\n" +
		"    ALTER TABLE " + t + " ADD " + quoteIdent(FindIndexColumn) + " AS CAST(message_uuid AS nvarchar(400));\n\n" +
		"IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = " + quoteString(ix) + " AND object_id = OBJECT_ID(" + quoteString(t) + "))\n" +
		"    CREATE INDEX " + quoteIdent(ix) + " ON " + t + " (" + quoteIdent(FindIndexColumn) + ");\n", nil
}

var _ outbox.Finder = (*Store)(nil)

// FindRows returns the rows q selects (see outbox.Finder). Every statement seeks an
// index: a UUID the computed column's index when the table has one (FindIndexScript),
// else the clustered primary key over its window; an ordering key the pending and the
// parked filtered indexes (lane, id) of its lane; a window with a topic the clustered
// primary key over the window. Strings are compared byte for byte (sameKey).
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
			return nil, false, fmt.Errorf("sqlserver: find: %w (sqlserver.FindIndexScript adds it)", outbox.ErrFindNeedsIndex)
		}
	}
	var out []outbox.Record
	sc := s.scanner()
	defer s.scanners.Put(sc)
	for _, st := range findStatements(s.q.outbox, s.opts.Lanes, q, indexed) {
		rows, err := s.query(ctx, st.query, st.args...)
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

// findStatements builds FindRows' statements (one, or two for an ordering key).
func findStatements(table string, laneCount int, q outbox.FindQuery, indexed bool) []statement {
	lo, hi, hasHi := q.IDRange()
	build := func(where string, args ...any) statement {
		if q.HasWindow() {
			where += " AND o.id >= " + binParam("lo")
			args = append(args, named("lo", lo[:]))
			if hasHi {
				where += " AND o.id < " + binParam("hi")
				args = append(args, named("hi", hi[:]))
			}
		}
		return statement{query: "SELECT TOP (@n) " + selectCols + " FROM " + table + " AS o WHERE " + where + " ORDER BY o.id",
			args: append(args, named("n", int64(q.Limit+1)))}
	}
	switch {
	case q.MessageUUID != "" && indexed:
		return []statement{build("o."+quoteIdent(FindIndexColumn)+" = CAST(@uuid AS nvarchar(400)) AND "+sameKey("o.message_uuid", "@uuid"),
			named("uuid", q.MessageUUID))}
	case q.MessageUUID != "":
		return []statement{build(sameKey("o.message_uuid", "@uuid"), named("uuid", q.MessageUUID))}
	case q.OrderingKey != "":
		lane := named("lane", int64(lanes.Of(q.OrderingKey, laneCount)))
		key := named("key", q.OrderingKey)
		return []statement{
			build("o.status = 'pending' AND o.lane = @lane AND "+sameKey("o.ordering_key", "@key"), lane, key),
			build("o.status = 'parked' AND o.lane = @lane AND "+sameKey("o.ordering_key", "@key"), lane, key),
		}
	default:
		return []statement{build(sameKey("o.destination", "@topic"), named("topic", q.Topic))}
	}
}

// hasFindIndex reports whether the rows table has an index led by FindIndexColumn.
func (s *Store) hasFindIndex(ctx context.Context) (bool, error) {
	const query = "SELECT COUNT(*) FROM sys.index_columns AS ic JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id " +
		"WHERE ic.object_id = OBJECT_ID(@t) AND ic.key_ordinal = 1 AND c.name = @col"
	var n int64
	if err := s.db.QueryRowContext(ctx, query, named("t", s.q.outbox), named("col", FindIndexColumn)).Scan(&n); err != nil {
		return false, fmt.Errorf("look for the message_uuid index: %w", err)
	}
	return n > 0, nil
}

// inboxFindStatement reads the entries of one UUID (@uuid): the consumers come from a
// recursive loose scan of the clustered key (consumer, message_uuid), one seek per
// consumer (a recursive member may not use TOP or MIN, so ROW_NUMBER picks the next),
// and each entry is a point of the key.
func inboxFindStatement(inbox string) string {
	return "WITH c AS (\n" +
		"    SELECT MIN(consumer) AS consumer FROM " + inbox + "\n" +
		"    UNION ALL\n" +
		"    SELECT r.consumer FROM (\n" +
		"        SELECT i.consumer, ROW_NUMBER() OVER (ORDER BY i.consumer) AS rn FROM " + inbox + " AS i JOIN c ON i.consumer > c.consumer\n" +
		"    ) AS r WHERE r.rn = 1\n" +
		")\n" +
		"SELECT e.consumer, e.processed_at, e.duplicates FROM c JOIN " + inbox + " AS e ON e.consumer = c.consumer AND e.message_uuid = @uuid " +
		"ORDER BY e.consumer OPTION (MAXRECURSION 0)"
}

// FindInbox returns the inbox entries of messageUUID (see outbox.Finder).
func (s *Store) FindInbox(ctx context.Context, messageUUID string) ([]outbox.InboxEntry, error) {
	rows, err := s.query(ctx, inboxFindStatement(s.q.inbox), named("uuid", []byte(messageUUID)))
	if err != nil {
		return nil, wrap("find inbox", inboxSchemaHint(err, s.q.inbox))
	}
	defer rows.Close()
	var out []outbox.InboxEntry
	for rows.Next() {
		e := outbox.InboxEntry{MessageUUID: messageUUID}
		var consumer []byte
		if err := rows.Scan(&consumer, &e.ProcessedAt, &e.Duplicates); err != nil {
			return nil, wrap("find inbox", err)
		}
		e.Consumer = string(consumer)
		e.ProcessedAt = e.ProcessedAt.UTC()
		out = append(out, e)
	}
	return out, wrap("find inbox", rows.Err())
}

// lockedRowsStatements are LockedRows' reads of n ids: the rows it can lock (UPDLOCK
// with READPAST passes over rows another transaction holds, as the forwarder's locked
// batch takes them) and the rows that exist (a read that takes no lock).
func (q *queries) lockedRowsStatements(n int) (free, present string) {
	where := " WHERE o.lane IS NULL AND o.id IN (" + idList(n) + ")"
	return "SELECT o.id FROM " + q.outbox + " AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)" + where,
		"SELECT o.id FROM " + q.outbox + " AS o WITH (NOLOCK)" + where
}

// LockedRows returns which of the unordered rows ids another transaction holds locked
// (see outbox.Finder), in a transaction rolled back at once. At most
// maxIDsPerStatement ids per call are probed (the rest are reported unlocked).
func (s *Store) LockedRows(ctx context.Context, ids []outbox.ID) ([]outbox.ID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ids = ids[:min(len(ids), maxIDsPerStatement)]
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrap("find: probe row locks", err)
	}
	defer func() { _ = tx.Rollback() }()
	freeQ, presentQ := s.q.lockedRowsStatements(len(ids))
	args := idArgs(nil, ids)
	free, err := idSet(ctx, tx, freeQ, args)
	if err != nil {
		return nil, wrap("find: probe row locks", err)
	}
	present, err := idSet(ctx, tx, presentQ, args)
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

// idSet runs q (selecting one id column) and returns the ids.
func idSet(ctx context.Context, tx *sql.Tx, q string, args []any) (map[outbox.ID]bool, error) {
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
