package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

// insertBuf holds one array per column of the unnest INSERT. Buffers are pooled per
// Store so a steady stream of commits allocates no per-row memory of its own; the
// element slices alias the caller's records (pgx encodes them before Exec returns).
type insertBuf struct {
	ids, headers, bodies                  [][]byte
	uuids, keys, transports, dests, types []string
	tenants                               []string
	lanes                                 []int32
	created, deliver                      []time.Time
	args                                  []any // pointers to the slices above: boxing a pointer allocates nothing
}

func newInsertBuf() *insertBuf {
	b := &insertBuf{}
	b.args = []any{&b.ids, &b.uuids, &b.lanes, &b.keys, &b.transports, &b.dests, &b.types,
		&b.headers, &b.bodies, &b.tenants, &b.created, &b.deliver}
	return b
}

// reset empties the buffers and drops the references to the caller's records.
func (b *insertBuf) reset() {
	clear(b.ids)
	clear(b.headers)
	clear(b.bodies)
	clear(b.uuids)
	clear(b.keys)
	clear(b.transports)
	clear(b.dests)
	clear(b.types)
	clear(b.tenants)
	b.ids, b.headers, b.bodies = b.ids[:0], b.headers[:0], b.bodies[:0]
	b.uuids, b.keys, b.transports, b.dests, b.types = b.uuids[:0], b.keys[:0], b.transports[:0], b.dests[:0], b.types[:0]
	b.tenants, b.lanes, b.created, b.deliver = b.tenants[:0], b.lanes[:0], b.created[:0], b.deliver[:0]
}

// maxPooledRows keeps one huge commit from pinning its buffers in the pool forever.
const maxPooledRows = 16384

// emptyBytes stands for a nil body: pgx sends a nil []byte as NULL.
var emptyBytes = []byte{}

// Insert writes records in the caller's transaction with one statement (one round trip
// once the statement is prepared on the connection), whatever the batch size. Every
// record is validated first: an invalid one fails the call with an error wrapping
// outbox.ErrInvalidRecord and nothing is sent.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
	if tx == nil {
		return errors.New("postgres: insert: tx is nil")
	}
	for i := range records {
		if err := s.checkRecord(&records[i]); err != nil {
			return fmt.Errorf("postgres: insert: record %d (id %s): %w", i, records[i].ID, err)
		}
	}
	if len(records) == 0 {
		return ctx.Err()
	}
	b, _ := s.inserts.Get().(*insertBuf)
	if b == nil {
		b = newInsertBuf()
	}
	for i := range records {
		r := &records[i]
		body := r.Body
		if body == nil {
			body = emptyBytes
		}
		deliver := r.DeliverAt
		if deliver.IsZero() {
			deliver = r.CreatedAt
		}
		b.ids = append(b.ids, r.ID[:])
		b.uuids = append(b.uuids, r.MessageUUID)
		b.lanes = append(b.lanes, int32(r.Lane)) // Unordered (-1) becomes NULL in SQL
		b.keys = append(b.keys, r.OrderingKey)
		b.transports = append(b.transports, r.Transport)
		b.dests = append(b.dests, r.Destination)
		b.types = append(b.types, r.MessageType)
		b.headers = append(b.headers, r.Headers)
		b.bodies = append(b.bodies, body)
		b.tenants = append(b.tenants, r.TenantID)
		b.created = append(b.created, r.CreatedAt)
		b.deliver = append(b.deliver, deliver)
	}
	_, err := tx.ExecContext(ctx, s.q.insert, b.args...)
	b.reset()
	if cap(b.ids) <= maxPooledRows {
		s.inserts.Put(b)
	}
	return wrap("insert", err)
}

// checkRecord rejects what the table would reject (or silently change) before anything
// is sent, so a bad record never aborts the caller's transaction.
func (s *Store) checkRecord(r *outbox.Record) error {
	if r.ID.IsZero() {
		return fmt.Errorf("%w: zero ID", outbox.ErrInvalidRecord)
	}
	if r.Lane < outbox.Unordered || r.Lane >= s.opts.Lanes {
		return fmt.Errorf("%w: lane %d out of range [%d, %d)", outbox.ErrInvalidRecord, r.Lane, outbox.Unordered, s.opts.Lanes)
	}
	if err := headercodec.Validate(r.Headers); err != nil {
		return fmt.Errorf("%w: headers: %w", outbox.ErrInvalidRecord, err)
	}
	for _, f := range [...]struct{ name, v string }{
		{"MessageUUID", r.MessageUUID}, {"OrderingKey", r.OrderingKey}, {"Transport", r.Transport},
		{"Destination", r.Destination}, {"MessageType", r.MessageType}, {"TenantID", r.TenantID},
	} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%w: %s is not valid UTF-8", outbox.ErrInvalidRecord, f.name)
		}
		if strings.IndexByte(f.v, 0) >= 0 {
			return fmt.Errorf("%w: %s contains a NUL character (PostgreSQL text cannot hold it)", outbox.ErrInvalidRecord, f.name)
		}
	}
	return nil
}
