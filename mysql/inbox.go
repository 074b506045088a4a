package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/beginfirst"
	"github.com/relayer-go/watermill-outbox/internal/inboxstats"
)

var _ outbox.Inbox = (*Store)(nil)

// RecordInbox inserts (consumer, messageUUID) in tx with ON DUPLICATE KEY UPDATE: a
// pair recorded and committed before gets its duplicates count raised instead (2 rows
// affected), and RecordInbox reports false.
func (s *Store) RecordInbox(ctx context.Context, tx *sql.Tx, consumer, messageUUID string, processedAt time.Time) (bool, error) {
	if err := outbox.CheckInboxEntry(consumer, messageUUID); err != nil {
		return false, fmt.Errorf("mysql: record inbox: %w", err)
	}
	if tx == nil {
		return false, fmt.Errorf("mysql: %w: record inbox: tx is nil", outbox.ErrInvalidArgument)
	}
	at, err := timeArg(processedAt)
	if err != nil {
		return false, fmt.Errorf("mysql: record inbox: processedAt: %w", err)
	}
	res, err := execB(ctx, tx, s.q.inboxRecord, consumer, messageUUID, at)
	if err != nil {
		return false, wrapErr("record inbox", s.schemaErr(inboxSchemaHint(err, s.q.inbox)))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, wrapErr("record inbox", err)
	}
	return inboxFirst(n)
}

// inboxFirst reads the inbox INSERT's affected-row count: 1 for a new entry, 2 for a
// duplicate whose count was raised (whatever clientFoundRows says).
func inboxFirst(n int64) (bool, error) {
	if n != 1 && n != 2 {
		return false, fmt.Errorf("mysql: record inbox: %d rows affected; want 1 (new) or 2 (duplicate)", n)
	}
	return n == 1, nil
}

var _ outbox.InboxBeginner = (*Store)(nil)

// BeginRecordInbox begins a transaction on db with opts whose first statement records
// (consumer, messageUUID), as RecordInbox does. On a pool opened through
// [NewConnector] ([OpenDB]) START TRANSACTION and the record go as one query, one round
// trip; on another pool the same statement follows the BEGIN (beginfirst.Begin).
func (s *Store) BeginRecordInbox(ctx context.Context, db *sql.DB, opts *sql.TxOptions, consumer, messageUUID string, processedAt time.Time) (*sql.Tx, bool, error) {
	if err := outbox.CheckInboxEntry(consumer, messageUUID); err != nil {
		return nil, false, fmt.Errorf("mysql: record inbox: %w", err)
	}
	at, err := timeArg(processedAt)
	if err != nil {
		return nil, false, fmt.Errorf("mysql: record inbox: processedAt: %w", err)
	}
	first := &beginfirst.Statement{Dialect: dialect, Query: bind(s.q.inboxRecord, consumer, messageUUID, at)}
	tx, err := beginfirst.Begin(ctx, db, opts, first)
	if err != nil {
		return nil, false, wrapErr("begin and record inbox", s.schemaErr(inboxSchemaHint(err, s.q.inbox)))
	}
	ok, err := inboxFirst(first.Affected)
	if err != nil {
		_ = tx.Rollback()
		return nil, false, err
	}
	return tx, ok, nil
}

// inboxSchemaHint names the fix when the inbox table predates its duplicates column
// (error 1054, unknown column).
func inboxSchemaHint(err error, table string) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erBadField && strings.Contains(me.Message, "duplicates") {
		return outbox.SchemaOutdated(err, "ALTER TABLE "+table+" ADD COLUMN duplicates BIGINT NOT NULL DEFAULT 0")
	}
	return err
}

// PruneInbox deletes up to limit entries processed before before, oldest first.
func (s *Store) PruneInbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	b, err := timeArg(before)
	if err != nil {
		return 0, fmt.Errorf("mysql: prune inbox: before: %w", err)
	}
	res, err := s.exec(ctx, s.q.inboxPrune, b, int64(limit))
	if err != nil {
		return 0, wrapErr("prune inbox", err)
	}
	n, err := res.RowsAffected()
	return int(n), wrapErr("prune inbox", err)
}

// InboxStats returns the inbox table's figures per consumer with bounded reads
// (internal/inboxstats).
func (s *Store) InboxStats(ctx context.Context) (outbox.InboxStats, error) {
	st, err := inboxstats.Read(ctx, inboxReader{s})
	if err != nil {
		return outbox.InboxStats{}, wrapErr("inbox stats", s.schemaErr(inboxSchemaHint(err, s.q.inbox)))
	}
	return st, nil
}

// inboxReader is the store's inboxstats.Reader.
type inboxReader struct{ s *Store }

func (r inboxReader) NextConsumer(ctx context.Context, after string) (string, bool, error) {
	var consumer []byte
	var dups int64
	err := queryRowB(ctx, r.s.db, r.s.q.inboxNextConsumer, []byte(after)).Scan(&consumer, &dups)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return string(consumer), err == nil, err
}

func (r inboxReader) Consumer(ctx context.Context, consumer string, limit int) (int64, time.Time, int64, error) {
	var n, dups int64
	var oldest []byte // Row.Scan takes no sql.RawBytes
	row := queryRowB(ctx, r.s.db, r.s.q.inboxConsumer, []byte(consumer), int64(limit))
	if err := row.Scan(&n, &oldest, &dups); err != nil {
		return 0, time.Time{}, 0, err
	}
	t, err := parseNullTime(oldest)
	return n, t, dups, err
}

func (r inboxReader) Oldest(ctx context.Context) (time.Time, error) {
	var oldest []byte
	if err := queryRowB(ctx, r.s.db, r.s.q.inboxOldest).Scan(&oldest); err != nil {
		return time.Time{}, err
	}
	return parseNullTime(oldest)
}

func (r inboxReader) Estimate(ctx context.Context) (int64, error) {
	var schema any
	if r.s.opts.Schema != "" {
		schema = r.s.opts.Schema
	}
	var n int64
	err := r.s.db.QueryRowContext(ctx, r.s.q.inboxEstimate, schema, r.s.opts.InboxTable()).Scan(&n)
	return n, err
}

// AcquireInboxLease takes or extends the retention lease; the lease row is locked in a
// short transaction, as AcquireLease does for lanes.
func (s *Store) AcquireInboxLease(ctx context.Context, l outbox.InboxLeaseParams) (bool, error) {
	if err := outbox.CheckInboxLease(l); err != nil {
		return false, fmt.Errorf("mysql: %w", err)
	}
	now, err := timeArg(l.Now)
	if err != nil {
		return false, fmt.Errorf("mysql: acquire inbox lease: Now: %w", err)
	}
	until, err := timeArg(l.Until)
	if err != nil {
		return false, fmt.Errorf("mysql: acquire inbox lease: Until: %w", err)
	}
	held := false
	err = s.inTxRetry(ctx, func(tx *sql.Tx) error {
		held = false
		var same, live bool
		err := queryRowB(ctx, tx, s.q.inboxLeaseLock, l.Token[:], now).Scan(&same, &live)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = execB(ctx, tx, s.q.inboxLeaseInsert, l.Owner, l.Token[:], until)
			if isDupEntry(err) {
				return nil // another instance inserted it first
			}
		case err != nil:
			return err
		case live && !same:
			return nil
		default: // ours, or expired
			_, err = execB(ctx, tx, s.q.inboxLeaseSet, l.Owner, l.Token[:], until)
		}
		held = err == nil
		return err
	})
	if err != nil {
		return false, wrapErr("acquire inbox lease", err)
	}
	return held, nil
}

// ReleaseInboxLease deletes the retention lease when token holds it.
func (s *Store) ReleaseInboxLease(ctx context.Context, token outbox.Token) (bool, error) {
	if token.IsZero() {
		return false, nil
	}
	res, err := s.exec(ctx, s.q.inboxLeaseRelease, token[:])
	if err != nil {
		return false, wrapErr("release inbox lease", err)
	}
	n, err := res.RowsAffected()
	return n > 0, wrapErr("release inbox lease", err)
}
