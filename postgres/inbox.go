package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/beginfirst"
	"github.com/relayer-go/watermill-outbox/internal/inboxstats"
)

var _ outbox.Inbox = (*Store)(nil)

// RecordInbox inserts (consumer, messageUUID) in tx with ON CONFLICT DO UPDATE: a pair
// recorded and committed before gets its duplicates count raised instead (RETURNING
// gives at least 1), and RecordInbox reports false.
func (s *Store) RecordInbox(ctx context.Context, tx *sql.Tx, consumer, messageUUID string, processedAt time.Time) (bool, error) {
	if err := outbox.CheckInboxEntry(consumer, messageUUID); err != nil {
		return false, fmt.Errorf("postgres: record inbox: %w", err)
	}
	if tx == nil {
		return false, fmt.Errorf("postgres: %w: record inbox: tx is nil", outbox.ErrInvalidArgument)
	}
	var dups int64
	if err := tx.QueryRowContext(ctx, s.q.inboxRecord, consumer, messageUUID, processedAt).Scan(&dups); err != nil {
		return false, wrap("record inbox", s.schemaErr(inboxSchemaHint(err, s.q.n.inbox)))
	}
	return dups == 0, nil
}

var _ outbox.InboxBeginner = (*Store)(nil)

// BeginRecordInbox begins a transaction on db with opts whose first statement records
// (consumer, messageUUID), as RecordInbox does. On a pool opened through
// [WrapConnector] ([OpenDB]) the BEGIN and the record go in one round trip; on another
// pool the same statement follows the BEGIN (beginfirst.Begin).
func (s *Store) BeginRecordInbox(ctx context.Context, db *sql.DB, opts *sql.TxOptions, consumer, messageUUID string, processedAt time.Time) (*sql.Tx, bool, error) {
	if err := outbox.CheckInboxEntry(consumer, messageUUID); err != nil {
		return nil, false, fmt.Errorf("postgres: record inbox: %w", err)
	}
	var dups int64
	first := &beginfirst.Statement{Dialect: dialect, Query: s.q.inboxRecord, Args: []any{consumer, messageUUID, processedAt}, Dest: []any{&dups}}
	tx, err := beginfirst.Begin(ctx, db, opts, first)
	if err != nil {
		return nil, false, wrap("begin and record inbox", s.schemaErr(inboxSchemaHint(err, s.q.n.inbox)))
	}
	return tx, dups == 0, nil
}

// inboxSchemaHint names the fix when the inbox table predates its duplicates column
// (SQLSTATE 42703, undefined column).
func inboxSchemaHint(err error, table string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42703" && strings.Contains(pe.Message, "duplicates") {
		return outbox.SchemaOutdated(err, "ALTER TABLE "+table+" ADD COLUMN duplicates bigint NOT NULL DEFAULT 0")
	}
	return err
}

// PruneInbox deletes up to limit entries processed before before, oldest first.
func (s *Store) PruneInbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	return s.execCount(ctx, "prune inbox", s.q.inboxPrune, before, limit)
}

// InboxStats returns the inbox table's figures per consumer with bounded reads
// (internal/inboxstats).
func (s *Store) InboxStats(ctx context.Context) (outbox.InboxStats, error) {
	st, err := inboxstats.Read(ctx, inboxReader{s})
	if err != nil {
		return outbox.InboxStats{}, wrap("inbox stats", s.schemaErr(inboxSchemaHint(err, s.q.n.inbox)))
	}
	return st, nil
}

// inboxReader is the store's inboxstats.Reader.
type inboxReader struct{ s *Store }

func (r inboxReader) NextConsumer(ctx context.Context, after string) (string, bool, error) {
	var consumer string
	var dups int64
	err := r.s.db.QueryRowContext(ctx, r.s.q.inboxNextConsumer, after).Scan(&consumer, &dups)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return consumer, err == nil, err
}

func (r inboxReader) Consumer(ctx context.Context, consumer string, limit int) (int64, time.Time, int64, error) {
	var n, dups int64
	var oldest sql.NullTime
	err := r.s.db.QueryRowContext(ctx, r.s.q.inboxConsumer, consumer, limit).Scan(&n, &oldest, &dups)
	return n, oldest.Time, dups, err
}

func (r inboxReader) Oldest(ctx context.Context) (time.Time, error) {
	var oldest sql.NullTime
	err := r.s.db.QueryRowContext(ctx, r.s.q.inboxOldest).Scan(&oldest)
	return oldest.Time, err
}

func (r inboxReader) Estimate(ctx context.Context) (int64, error) {
	var n int64
	err := r.s.db.QueryRowContext(ctx, r.s.q.inboxEstimate, r.s.q.n.inbox).Scan(&n)
	return n, err
}

// AcquireInboxLease takes or extends the retention lease in one statement.
func (s *Store) AcquireInboxLease(ctx context.Context, l outbox.InboxLeaseParams) (bool, error) {
	if err := outbox.CheckInboxLease(l); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	n, err := s.execCount(ctx, "acquire inbox lease", s.q.inboxAcquire, l.Owner, l.Token[:], l.Now, l.Until)
	return n > 0, err
}

// ReleaseInboxLease deletes the retention lease when token holds it.
func (s *Store) ReleaseInboxLease(ctx context.Context, token outbox.Token) (bool, error) {
	if token.IsZero() {
		return false, nil
	}
	n, err := s.execCount(ctx, "release inbox lease", s.q.inboxRelease, token[:])
	return n > 0, err
}
