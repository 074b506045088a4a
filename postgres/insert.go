package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/inscols"
)

// insertBuf holds one array per column of the unnest INSERT; the VALUES INSERT of small
// batches binds pointers to the same elements. Buffers are pooled per Store so a steady
// stream of commits allocates no per-row memory of its own; the elements alias the
// caller's records (pgx encodes them before Exec returns).
type insertBuf struct {
	ids, headers, bodies                           column[byteaElem]
	uuids, keys, transports, dests, types, tenants column[textElem]
	lanes                                          column[int4Elem]
	createds, deliver                              column[timeElem]
	args                                           []any // the unnest statement's
	valuesArgs                                     []any // the VALUES statement's

	dest    string    // the destination of every row, under sharedDest
	created time.Time // the created_at of every row, under sharedCreated
}

func newInsertBuf() *insertBuf { return &insertBuf{} }

// unnestArgs sets b.args to the arrays of insertUnnest(cols), in its order. Pointers:
// boxing a pointer allocates nothing.
func (b *insertBuf) unnestArgs(cols int) []any {
	var dest, created any = &b.dests, &b.createds
	if cols&sharedDest != 0 {
		dest = &b.dest
	}
	if cols&sharedCreated != 0 {
		created = &b.created
	}
	b.args = append(b.args[:0], &b.ids, &b.uuids)
	for _, c := range [...]struct {
		bit int
		arg any
	}{{inscols.Lane, &b.lanes}, {inscols.Key, &b.keys}, {inscols.Transport, &b.transports}, {0, dest}, {inscols.Type, &b.types},
		{0, &b.headers}, {0, &b.bodies}, {inscols.Tenant, &b.tenants}, {0, created}, {inscols.Deliver, &b.deliver}} {
		if c.bit == 0 || cols&c.bit != 0 {
			b.args = append(b.args, c.arg)
		}
	}
	return b.args
}

// sharedValues returns the shared bits that hold for records: every row with the same
// destination, or the same created_at.
func sharedValues(records []outbox.Record) int {
	bits := sharedDest | sharedCreated
	first := &records[0]
	for i := 1; i < len(records) && bits != 0; i++ {
		if records[i].Destination != first.Destination {
			bits &^= sharedDest
		}
		if !records[i].CreatedAt.Equal(first.CreatedAt) {
			bits &^= sharedCreated
		}
	}
	return bits
}

// reset empties the buffers and drops the references to the caller's records.
func (b *insertBuf) reset() {
	for _, c := range []interface{ reset() }{&b.ids, &b.headers, &b.bodies, &b.uuids, &b.keys, &b.transports,
		&b.dests, &b.types, &b.tenants, &b.lanes, &b.createds, &b.deliver} {
		c.reset()
	}
	b.dest, b.created = "", time.Time{}
}

// column is a one-dimensional array parameter that pgx encodes in binary without boxing
// each element: Index returns a pointer into elems (no allocation), and each element
// type implements the pgtype valuer interface of its codec. pgx's own slice support
// boxes every string, []byte and time.Time, which costs ten allocations a row.
//
// When the application's DSN selects a query execution mode that does not learn the
// parameter types from the server (default_query_exec_mode=exec or simple_protocol,
// e.g. behind PgBouncer), pgx cannot pick the array codec and falls back to Value: the
// array's text form, which the statement's casts parse.
type column[E arrayElem] struct {
	elems []E
	dims  [1]pgtype.ArrayDimension
}

// arrayElem is an element that can write itself as a quoted array-literal element.
type arrayElem interface {
	appendArrayText(dst []byte) []byte
}

func (c *column[E]) Dimensions() []pgtype.ArrayDimension {
	c.dims[0] = pgtype.ArrayDimension{Length: int32(len(c.elems)), LowerBound: 1}
	return c.dims[:]
}
func (c *column[E]) Index(i int) any { return &c.elems[i] }
func (c *column[E]) IndexType() any  { return (*E)(nil) }
func (c *column[E]) add(e E)         { c.elems = append(c.elems, e) }
func (c *column[E]) reset()          { clear(c.elems); c.elems = c.elems[:0] }

// Value returns the array's text form ({"a","b"}), for the modes described on column.
func (c *column[E]) Value() (driver.Value, error) {
	buf := []byte{'{'}
	for i := range c.elems {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = c.elems[i].appendArrayText(buf)
	}
	return string(append(buf, '}')), nil
}

type (
	byteaElem []byte
	textElem  string
	int4Elem  int32
	timeElem  time.Time
)

func (e *byteaElem) BytesValue() ([]byte, error) { return *e, nil }
func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}
func (e *int4Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}
func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

// Value serves the query modes that do not learn parameter types (see column); the other
// element kinds are found there through their underlying types.
func (e *timeElem) Value() (driver.Value, error) { return time.Time(*e), nil }

// Array-literal elements are double-quoted with backslash escapes; a bytea element is
// its hex form ("\\x..." in the literal).
func (e byteaElem) appendArrayText(dst []byte) []byte {
	dst = append(dst, `"\\x`...)
	dst = hex.AppendEncode(dst, e)
	return append(dst, '"')
}

func (e textElem) appendArrayText(dst []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(e); i++ {
		if e[i] == '"' || e[i] == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, e[i])
	}
	return append(dst, '"')
}

func (e int4Elem) appendArrayText(dst []byte) []byte { return strconv.AppendInt(dst, int64(e), 10) }

func (e timeElem) appendArrayText(dst []byte) []byte {
	dst = append(dst, '"')
	dst = time.Time(e).UTC().AppendFormat(dst, "2006-01-02 15:04:05.999999")
	return append(dst, `+00"`...)
}

var (
	_ pgtype.ArrayGetter       = (*column[byteaElem])(nil)
	_ driver.Valuer            = (*column[byteaElem])(nil)
	_ pgtype.BytesValuer       = (*byteaElem)(nil)
	_ pgtype.TextValuer        = (*textElem)(nil)
	_ pgtype.Int64Valuer       = (*int4Elem)(nil)
	_ pgtype.TimestamptzValuer = (*timeElem)(nil)
)

// valuesMaxRows is the largest batch written with a VALUES list instead of unnest.
const valuesMaxRows = 16

// maxPooledRows keeps one huge commit from pinning its buffers in the pool forever.
const maxPooledRows = 16384

// emptyBytes stands for a nil body: pgx sends a nil []byte as NULL.
var emptyBytes = []byte{}

// Insert writes records in the caller's transaction with one statement (one round trip
// once the statement is prepared on the connection), whatever the batch size: a VALUES
// list up to valuesMaxRows rows, INSERT ... SELECT FROM unnest of one array per column
// above. Every record is validated first: an invalid one fails the call with an error
// wrapping outbox.ErrInvalidRecord and nothing is sent.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
	return s.schemaErr(s.insert(ctx, tx, records)) // a missing table names the fix
}

// insert is Insert without the missing-table hint.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
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
	cols := inscols.All // the VALUES statement names every column
	if len(records) > valuesMaxRows {
		cols = sharedValues(records)
		for i := range records {
			cols |= inscols.Of(&records[i])
		}
		// Truncated to microseconds as the array elements are, so that the stored value
		// does not depend on how the query mode encodes a time.Time.
		b.dest, b.created = records[0].Destination, records[0].CreatedAt.Truncate(time.Microsecond)
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
		b.ids.add(r.ID[:])
		b.uuids.add(textElem(r.MessageUUID))
		if cols&sharedDest == 0 {
			b.dests.add(textElem(r.Destination))
		}
		b.headers.add(r.Headers)
		b.bodies.add(body)
		if cols&sharedCreated == 0 {
			b.createds.add(timeElem(r.CreatedAt))
		}
		if cols&inscols.Lane != 0 {
			b.lanes.add(int4Elem(r.Lane)) // Unordered (-1) becomes NULL in SQL
		}
		if cols&inscols.Key != 0 {
			b.keys.add(textElem(r.OrderingKey))
		}
		if cols&inscols.Transport != 0 {
			b.transports.add(textElem(r.Transport))
		}
		if cols&inscols.Type != 0 {
			b.types.add(textElem(r.MessageType))
		}
		if cols&inscols.Tenant != 0 {
			b.tenants.add(textElem(r.TenantID))
		}
		if cols&inscols.Deliver != 0 {
			b.deliver.add(timeElem(deliver))
		}
	}
	var err error
	if n := len(records); n <= valuesMaxRows {
		// Small batches: a VALUES list plans and runs faster than unnest's twelve arrays
		// (BenchmarkInsertStatement). The arguments point into the same buffers.
		args := b.valuesArgs[:0]
		for i := range n {
			args = append(args, &b.ids.elems[i], &b.uuids.elems[i], &b.lanes.elems[i], &b.keys.elems[i],
				&b.transports.elems[i], &b.dests.elems[i], &b.types.elems[i], &b.headers.elems[i],
				&b.bodies.elems[i], &b.tenants.elems[i], &b.createds.elems[i], &b.deliver.elems[i])
		}
		_, err = tx.ExecContext(ctx, s.q.insertValues[n], args...)
		clear(args)
		b.valuesArgs = args[:0]
	} else {
		_, err = tx.ExecContext(ctx, s.q.insert[cols], b.unnestArgs(cols)...)
		clear(b.args)
	}
	b.reset()
	if cap(b.ids.elems) <= maxPooledRows {
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
