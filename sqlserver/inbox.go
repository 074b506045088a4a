package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxstats"
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

// InboxStats returns the inbox table's figures per consumer with bounded reads
// (internal/inboxstats).
func (s *Store) InboxStats(ctx context.Context) (outbox.InboxStats, error) {
	st, err := inboxstats.Read(ctx, inboxReader{s})
	if err != nil {
		return outbox.InboxStats{}, wrap("inbox stats", s.schemaErr(inboxSchemaHint(err, s.q.inbox)))
	}
	return st, nil
}

// inboxReader is the store's inboxstats.Reader.
type inboxReader struct{ s *Store }

func (r inboxReader) row(ctx context.Context, query string, dest []any, args ...any) error {
	return retry(ctx, func() error { return r.s.db.QueryRowContext(ctx, query, args...).Scan(dest...) })
}

func (r inboxReader) NextConsumer(ctx context.Context, after string) (string, bool, error) {
	var consumer []byte
	var dups int64
	err := r.row(ctx, r.s.q.inboxNextConsumer, []any{&consumer, &dups}, named("after", []byte(after)))
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return string(consumer), err == nil, err
}

func (r inboxReader) Consumer(ctx context.Context, consumer string, limit int) (int64, time.Time, int64, error) {
	var n, dups int64
	var oldest sql.NullTime
	err := r.row(ctx, r.s.q.inboxConsumer, []any{&n, &oldest, &dups}, named("n", int64(limit)), named("consumer", []byte(consumer)))
	return n, oldest.Time, dups, err
}

func (r inboxReader) Oldest(ctx context.Context) (time.Time, error) {
	var oldest sql.NullTime
	err := r.row(ctx, r.s.q.inboxOldest, []any{&oldest})
	return oldest.Time, err
}

func (r inboxReader) Estimate(ctx context.Context) (int64, error) {
	var n int64
	err := r.row(ctx, r.s.q.inboxEstimate, []any{&n}, named("table", r.s.q.inbox))
	return n, err
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
