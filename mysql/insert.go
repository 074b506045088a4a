package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/inscols"
)

const (
	// maxPlaceholders is the most parameters a server-side prepared statement takes.
	maxPlaceholders = 65535
	// inlineMaxBytes is the largest text chunk (by rowEstimate) sent with inlined
	// values: up to it, one text round trip beats a statement prepared for the call
	// (measured with 1,000 rows of 256 bytes); beyond, hex doubles what travels. (Full
	// row groups go through cached prepared statements before: insertstmt.go.)
	inlineMaxBytes = 2 << 20
	// argsPerRow is the most parameters one text row binds (id, message UUID, ordering
	// key, transport, destination, type, headers, body, tenant; instants, lane and
	// empty values are inlined as literals).
	argsPerRow = 9
	// packetMargin leaves room for the packet header and the driver's framing.
	packetMargin = 4 << 10
	// maxStatementBytes caps one statement whatever the server allows. Beyond a few MiB
	// a statement saves nothing measurable, and the DSN's maxAllowedPacket (driver side,
	// 64 MiB by default) is not visible to the store.
	maxStatementBytes = 4 << 20
	// chunkBytes is the smallest statement of a text batch split into several: a batch
	// larger than it goes in statements of about a quarter of it (at least chunkBytes,
	// at most maxStatementBytes), each built while the previous one executes (and up to
	// this size the driver reuses its packet buffer).
	chunkBytes = 256 << 10
	// defaultMaxPacket is assumed when the server's value cannot be read as a number.
	defaultMaxPacket = 4 << 20
)

// insertHead is "INSERT INTO table (columns) VALUES " naming the optional columns of
// cols, in the order appendRow writes them.
func insertHead(table string, cols int) string {
	b := []byte("INSERT INTO " + table + " (id, message_uuid")
	for _, c := range [...]struct {
		bit  int
		name string
	}{{inscols.Lane, "lane"}, {0, "seq"}, {inscols.Key, "ordering_key"}, {inscols.Transport, "transport"}, {0, "destination"},
		{inscols.Type, "message_type"}, {0, "headers"}, {0, "body"}, {inscols.Tenant, "tenant_id"}, {0, "created_at"}, {inscols.Deliver, "deliver_at"}} {
		if c.bit == 0 || cols&c.bit != 0 {
			b = append(b, ", "+c.name...)
		}
	}
	return string(append(b, ") VALUES "...))
}

// emptyHeaders is the encoding of no headers (version 1, count 0): stored for a record
// without headers, since the column never holds empty bytes.
const emptyHeaders = "X'0100000000000000'"

// insertBuf is the reusable SQL text and argument storage of one Insert call.
type insertBuf struct {
	sql  []byte
	args []any
}

var insertPool = sync.Pool{New: func() any { return new(insertBuf) }}

// Insert writes records inside tx with multi-row INSERT statements, each under the
// server's max_allowed_packet and the placeholder limit: full groups of preparedRows
// rows through cached prepared statements (insertPrepared), the rest as text
// (insertText). Every record is validated first: an invalid one fails the call
// (outbox.ErrInvalidRecord) before anything is written.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
	return s.schemaErr(s.insert(ctx, tx, records)) // a missing table names the fix
}

// insert is Insert without the missing-table hint.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
	if tx == nil {
		return fmt.Errorf("mysql: insert: tx is nil")
	}
	for i := range records {
		if err := s.validateRecord(&records[i]); err != nil {
			return fmt.Errorf("%w: record %d (id %s): %s", outbox.ErrInvalidRecord, i, records[i].ID, err)
		}
	}
	if len(records) == 0 {
		return nil
	}
	if err := s.checkLaneKey(ctx, tx); err != nil {
		return wrapErr("insert", err)
	}
	maxPacket, err := s.maxAllowedPacket(ctx, tx)
	if err != nil {
		return wrapErr("insert", err)
	}
	// The driver refuses (and drops the connection for) a packet above the DSN's
	// maxAllowedPacket, which the store cannot see: statements stay under
	// maxStatementBytes too, so any DSN value from 4 MiB up works.
	limit := min(maxStatementBytes, maxPacket) - packetMargin
	start, err := s.insertPrepared(ctx, tx, records, 0, limit)
	if err != nil || start == len(records) {
		return err
	}
	return s.insertText(ctx, tx, records, start, limit)
}

// insertText inserts records[start:] as text statements of at most limit bytes.
func (s *Store) insertText(ctx context.Context, tx *sql.Tx, records []outbox.Record, start, limit int) error {
	total := 0
	for i := start; i < len(records); i++ {
		total += rowEstimate(&records[i])
	}
	budget := min(max(total/4, chunkBytes-packetMargin), limit)

	// Statements are built one ahead: while the server inserts one chunk, a goroutine
	// encodes the next one into the other buffer, so that the encoding of all but the
	// first chunk costs no time.
	bufs := [2]*insertBuf{getInsertBuf(), nil}
	defer func() { putInsertBuf(bufs[0]); putInsertBuf(bufs[1]) }()
	c := s.nextChunk(records, start, budget)
	s.buildChunk(bufs[0], records, c)
	for k := 0; ; k++ {
		cur := bufs[k%2]
		var next chunk
		var built chan struct{}
		if c.end < len(records) {
			if bufs[1] == nil {
				bufs[1] = getInsertBuf()
			}
			next = s.nextChunk(records, c.end, budget)
			built = make(chan struct{})
			go func(buf *insertBuf) {
				defer close(built)
				s.buildChunk(buf, records, next)
			}(bufs[(k+1)%2])
		}
		// A copy: the buffer is written again, and a driver wrapper (tracing, logging)
		// may keep the query text.
		_, err := tx.ExecContext(ctx, string(cur.sql), cur.args...)
		clear(cur.args)
		if built != nil {
			<-built // the other buffer is written by the goroutine until then
		}
		if err != nil {
			return wrapErr(fmtRows(c.start, c.end, len(records)), err)
		}
		if built == nil {
			return nil
		}
		c = next
	}
}

// fmtRows names the rows [start, end) of an n-row batch in an error.
func fmtRows(start, end, n int) string {
	return fmt.Sprintf("insert rows %d..%d of %d", start, end-1, n)
}

// chunk is the rows of one statement, records[start:end]: their estimated text size
// and the optional columns they use.
type chunk struct{ start, end, size, cols int }

// nextChunk takes rows from start while the statement stays within budget bytes and
// the placeholder limit (always at least one row).
func (s *Store) nextChunk(records []outbox.Record, start, budget int) chunk {
	c := chunk{start: start, end: start, size: len(s.q.insert[inscols.All])}
	params := 0
	for c.end < len(records) {
		rowSize := rowEstimate(&records[c.end])
		if c.end > start && (c.size+rowSize > budget || params+argsPerRow > maxPlaceholders) {
			break
		}
		c.size += rowSize
		params += argsPerRow
		c.cols |= inscols.Of(&records[c.end])
		c.end++
	}
	return c
}

// buildChunk writes c's INSERT into buf. A chunk up to inlineMaxBytes goes as one text
// statement with its values inlined as hex literals: one round trip, where a statement
// prepared for the call takes two (prepare, execute) unless the DSN sets
// interpolateParams.
func (s *Store) buildChunk(buf *insertBuf, records []outbox.Record, c chunk) {
	b := append(buf.sql[:0], s.q.insert[c.cols]...)
	args := buf.args[:0]
	inline := c.size <= inlineMaxBytes
	if inline {
		b = slices.Grow(b, c.size) // size bounds the text: one allocation at most
	}
	for i := c.start; i < c.end; i++ {
		if i > c.start {
			b = append(b, ',')
		}
		b, args = appendRow(b, args, &records[i], c.cols, inline)
	}
	buf.sql, buf.args = b, args
}

func getInsertBuf() *insertBuf { return insertPool.Get().(*insertBuf) }

func putInsertBuf(buf *insertBuf) {
	if buf == nil {
		return
	}
	clear(buf.args) // drop references to the caller's bytes
	buf.args = buf.args[:0]
	if cap(buf.sql) <= 8<<20 { // keeps the buffers of up to ~40,000-row batches
		insertPool.Put(buf)
	}
}

// rowEstimate bounds the bytes one row adds to the statement: its SQL text plus every
// bound value escaped at worst (each byte doubled, quotes and a _binary introducer).
func rowEstimate(r *outbox.Record) int {
	n := 2*(len(r.MessageUUID)+len(r.OrderingKey)+len(r.Transport)+len(r.Destination)+
		len(r.MessageType)+len(r.Headers)+len(r.Body)+len(r.TenantID)+len(r.ID)) + argsPerRow*12
	return n + 160 // placeholders, lane, two instants, NULLs, separators
}

// appendRow appends "(...)" for r (the columns of insertHead(cols), in its order) and
// its arguments. Instants and the lane are inlined (the store formats them: digits
// only); empty optional values are inlined as NULL or an empty string. With inline set
// every value is inlined, bytes and strings as hex literals (only [0-9a-f] reaches the
// SQL text, whatever the value holds).
func appendRow(b []byte, args []any, r *outbox.Record, cols int, inline bool) ([]byte, []any) {
	b = append(b, '(')
	b, args = appendBytes(b, args, r.ID[:], inline)
	b = append(b, ',')
	b, args = appendString(b, args, r.MessageUUID, "''", inline)
	if cols&inscols.Lane != 0 { // an unordered row among ordered ones: -1, the column's default
		b = strconv.AppendInt(append(b, ','), int64(r.Lane), 10)
	}
	b = append(b, seqValue(r)...)
	if cols&inscols.Key != 0 {
		if r.OrderingKey == "" {
			b = append(b, ",NULL"...)
		} else {
			b, args = appendBytes(append(b, ','), args, keyArg(r.OrderingKey), inline)
		}
	}
	if cols&inscols.Transport != 0 {
		b, args = appendString(append(b, ','), args, r.Transport, "''", inline)
	}
	b, args = appendString(append(b, ','), args, r.Destination, "''", inline)
	if cols&inscols.Type != 0 {
		b, args = appendString(append(b, ','), args, r.MessageType, "NULL", inline)
	}
	b = append(b, ',')
	if len(r.Headers) == 0 {
		b = append(b, emptyHeaders...)
	} else {
		b, args = appendBytes(b, args, r.Headers, inline)
	}
	b = append(b, ',')
	if len(r.Body) == 0 {
		b = append(b, "''"...)
	} else {
		b, args = appendBytes(b, args, r.Body, inline)
	}
	if cols&inscols.Tenant != 0 {
		b, args = appendString(append(b, ','), args, r.TenantID, "NULL", inline)
	}
	b = append(b, ",'"...)
	b, _ = appendTime(b, r.CreatedAt) // validated
	if cols&inscols.Deliver != 0 {
		b = append(b, "','"...)
		if r.DeliverAt.IsZero() {
			b, _ = appendTime(b, r.CreatedAt)
		} else {
			b, _ = appendTime(b, r.DeliverAt)
		}
	}
	return append(b, "')"...), args
}

// seqValue is the seq of r in an INSERT (with its leading comma): NULL for a row of a
// lane, so that AUTO_INCREMENT numbers it as it is inserted (its place in the lane), and
// -1 for an unordered row, which keeps it out of the lanes' order and in the primary
// key's (lane -1, seq -1) range, in id order, where the unordered reads and by-id writes
// find it.
func seqValue(r *outbox.Record) string {
	if r.Lane == outbox.Unordered {
		return ",-1"
	}
	return ",NULL"
}

func appendBytes(b []byte, args []any, v []byte, inline bool) ([]byte, []any) {
	if inline {
		return appendHex(b, v), args
	}
	return append(b, '?'), append(args, v)
}

func appendString(b []byte, args []any, v, empty string, inline bool) ([]byte, []any) {
	switch {
	case v == "":
		return append(b, empty...), args
	case inline:
		b = append(b, "X'"...)
		b = hex.AppendEncode(b, unsafe.Slice(unsafe.StringData(v), len(v)))
		return append(b, '\''), args
	default:
		return append(b, '?'), append(args, v)
	}
}

// validateRecord checks what the table would reject (or silently alter), so that a bad
// batch fails before any row is written.
func (s *Store) validateRecord(r *outbox.Record) error {
	if r.ID.IsZero() {
		return fmt.Errorf("ID is zero")
	}
	if r.Lane < outbox.Unordered || r.Lane >= s.opts.Lanes {
		return fmt.Errorf("lane %d outside [%d, %d)", r.Lane, outbox.Unordered, s.opts.Lanes)
	}
	if r.CreatedAt.IsZero() {
		return fmt.Errorf("CreatedAt is zero")
	}
	if err := checkTime(r.CreatedAt); err != nil {
		return fmt.Errorf("CreatedAt: %w", err)
	}
	if err := checkTime(r.DeliverAt); err != nil && !r.DeliverAt.IsZero() {
		return fmt.Errorf("DeliverAt: %w", err)
	}
	if len(r.Headers) > 0 {
		if err := headercodec.Validate(r.Headers); err != nil {
			return fmt.Errorf("Headers: %w", err)
		}
	}
	if len(r.OrderingKey) > maxOrderingKey {
		return fmt.Errorf("OrderingKey is %d bytes; at most %d", len(r.OrderingKey), maxOrderingKey)
	}
	for _, f := range [...]struct {
		name string
		v    string
		max  int
	}{
		{"MessageUUID", r.MessageUUID, maxMessageUUID},
		{"Transport", r.Transport, maxTransport},
		{"Destination", r.Destination, maxDestination},
		{"MessageType", r.MessageType, maxMessageType},
		{"TenantID", r.TenantID, maxTenantID},
	} {
		if !validUTF8Max(f.v, f.max) {
			return fmt.Errorf("%s must be valid UTF-8 of at most %d characters", f.name, f.max)
		}
	}
	return nil
}

// maxAllowedPacket reads the server's max_allowed_packet once (through tx: the pool may
// have no other connection to spare) and caches it.
func (s *Store) maxAllowedPacket(ctx context.Context, tx *sql.Tx) (int, error) {
	if v := s.maxPacket.Load(); v > 0 {
		return int(v), nil
	}
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&v); err != nil {
		return 0, err
	}
	n := v.Int64
	if !v.Valid || n < 64<<10 {
		n = defaultMaxPacket
	}
	s.maxPacket.Store(n)
	return int(n), nil
}
