package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

var _ outbox.Inbox = (*Store)(nil)

// RecordInbox inserts (consumer, messageUUID) in tx; a duplicate key (2627/2601) means
// the pair was recorded and committed before: the entry's duplicates is raised (a
// second statement, for duplicates only), it reports false and tx stays usable.
func (s *Store) RecordInbox(ctx context.Context, tx *sql.Tx, consumer, messageUUID string, processedAt time.Time) (bool, error) {
	if err := outbox.CheckInboxEntry(consumer, messageUUID); err != nil {
		return false, fmt.Errorf("sqlserver: record inbox: %w", err)
	}
	if tx == nil {
		return false, invalidf("record inbox", "tx is nil")
	}
	key := []any{named("consumer", payload([]byte(consumer))), named("uuid", payload([]byte(messageUUID)))}
	_, err := tx.ExecContext(ctx, s.q.inboxRecord, append(key, named("at", processedAt.UTC()))...)
	switch {
	case err == nil:
		return true, nil
	case !isDuplicateKey(err):
		return false, wrap("record inbox", s.schemaErr(err))
	}
	if _, err := tx.ExecContext(ctx, s.q.inboxDuplicate, key...); err != nil {
		return false, wrap("record inbox: count the duplicate", s.schemaErr(inboxSchemaHint(err, s.q.inbox)))
	}
	return false, nil
}

var _ outbox.InboxBeginner = (*Store)(nil)

// BeginRecordInbox begins a transaction on db with opts and records (consumer,
// messageUUID) in it with RecordInbox: two round trips. SQL Server has no connector
// that joins them (go-mssqldb begins a transaction with a request of its own, which
// the next batch cannot travel with).
func (s *Store) BeginRecordInbox(ctx context.Context, db *sql.DB, opts *sql.TxOptions, consumer, messageUUID string, processedAt time.Time) (*sql.Tx, bool, error) {
	if err := outbox.CheckInboxEntry(consumer, messageUUID); err != nil {
		return nil, false, fmt.Errorf("sqlserver: record inbox: %w", err)
	}
	if db == nil {
		return nil, false, invalidf("record inbox", "db is nil")
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, false, wrap("begin and record inbox", err)
	}
	first, err := s.RecordInbox(ctx, tx, consumer, messageUUID, processedAt)
	if err != nil {
		_ = tx.Rollback()
		return nil, false, err
	}
	return tx, first, nil
}

// PruneInbox deletes up to limit entries processed before before, oldest first.
func (s *Store) PruneInbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	n, err := s.changed(ctx, s.q.inboxPrune, named("limit", int64(limit)), named("before", before.UTC()))
	return n, wrap("prune inbox", err)
}

// InboxStats returns the entries and oldest instant per consumer.
func (s *Store) InboxStats(ctx context.Context) (outbox.InboxStats, error) {
	rows, err := s.query(ctx, s.q.inboxStats, named("scope", int32(0)))
	if err != nil {
		return outbox.InboxStats{}, wrap("inbox stats", s.schemaErr(inboxSchemaHint(err, s.q.inbox)))
	}
	defer rows.Close()
	var st outbox.InboxStats
	for rows.Next() {
		var c outbox.InboxConsumerStats
		var consumer []byte
		if err := rows.Scan(&consumer, &c.Entries, &c.Oldest, &c.Duplicates); err != nil {
			return outbox.InboxStats{}, wrap("inbox stats", err)
		}
		c.Consumer, c.Oldest = string(consumer), c.Oldest.UTC()
		st.Consumers = append(st.Consumers, c)
	}
	if err := rows.Err(); err != nil {
		return outbox.InboxStats{}, wrap("inbox stats", err)
	}
	slices.SortFunc(st.Consumers, func(a, b outbox.InboxConsumerStats) int { return strings.Compare(a.Consumer, b.Consumer) })
	return st, nil
}

// AcquireInboxLease takes or extends the retention lease in one MERGE.
func (s *Store) AcquireInboxLease(ctx context.Context, l outbox.InboxLeaseParams) (bool, error) {
	if err := outbox.CheckInboxLease(l); err != nil {
		return false, fmt.Errorf("sqlserver: %w", err)
	}
	n, err := s.changed(ctx, s.q.inboxAcquire, named("owner", text(l.Owner)), named("tok", l.Token[:]),
		named("now", l.Now.UTC()), named("until", l.Until.UTC()))
	return n > 0, wrap("acquire inbox lease", err)
}

// ReleaseInboxLease deletes the retention lease when token holds it.
func (s *Store) ReleaseInboxLease(ctx context.Context, token outbox.Token) (bool, error) {
	if token.IsZero() {
		return false, nil
	}
	n, err := s.changed(ctx, s.q.inboxRelease, named("tok", token[:]))
	return n > 0, wrap("release inbox lease", err)
}
