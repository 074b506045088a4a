package mysql

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/sqlrows"
)

// recordColumns is the select list of a whole row, in the order rowScanner reads it.
// Instants are cast to text so that the DSN's parseTime and loc cannot change them.
// Columns that usually hold their default (lane -1 for unordered rows, transport empty,
// deliver_at = created_at, status 'pending') are read as NULL when they do, and the scanner restores the
// default: the driver boxes every non-NULL text value into an interface (one allocation
// per column and row), and a NULL costs nothing.
const recordColumns = `id, message_uuid, NULLIF(lane, -1), ordering_key, NULLIF(transport, ''), destination, message_type, ` +
	`headers, body, tenant_id, CAST(created_at AS CHAR), CAST(NULLIF(deliver_at, created_at) AS CHAR), attempts, ` +
	`last_error, NULLIF(status, 'pending'), claim_token, CAST(claim_expires_at AS CHAR), NULLIF(seq, -1)`

const (
	colID = iota
	colMessageUUID
	colLane
	colOrderingKey
	colTransport
	colDestination
	colMessageType
	colHeaders
	colBody
	colTenantID
	colCreatedAt
	colDeliverAt
	colAttempts
	colLastError
	colStatus
	colClaimToken
	colClaimExpiresAt
	colSeq
	numRecordColumns
	colBodySize = numRecordColumns // parkedColumns' extra column
)

// parkedColumns is the select list of ListParked: recordColumns with the payload cut to
// its first ? bytes (the first parameter), then its whole length.
var parkedColumns = strings.Replace(recordColumns, "headers, body,", "headers, SUBSTRING(body, 1, ?),", 1) + ", LENGTH(body)"

// rowScanner scans whole rows into sql.RawBytes (no per-column allocation by the driver
// or database/sql) and decodes them into reused records.
type rowScanner struct {
	raw  [numRecordColumns + 1]sql.RawBytes // and colBodySize
	dest [numRecordColumns + 1]any
	// the previous row's destination
	destination string
}

var scannerPool = sync.Pool{New: func() any {
	s := new(rowScanner)
	for i := range s.raw {
		s.dest[i] = &s.raw[i]
	}
	return s
}}

func getScanner() *rowScanner  { return scannerPool.Get().(*rowScanner) }
func putScanner(s *rowScanner) { clear(s.raw[:]); scannerPool.Put(s) }

// next grows dst by one record, reusing the storage of an element past len(dst) when
// there is one (its Headers and Body buffers are overwritten).
func next(dst []outbox.Record) ([]outbox.Record, *outbox.Record) {
	if len(dst) < cap(dst) {
		dst = dst[:len(dst)+1]
	} else {
		dst = append(dst, outbox.Record{})
	}
	return dst, &dst[len(dst)-1]
}

// scanSized reads the current row of parkedColumns into r, BodySize included.
func (s *rowScanner) scanSized(rows *sql.Rows, r *outbox.Record) error {
	if err := rows.Scan(s.dest[:]...); err != nil {
		return err
	}
	if err := s.decode(r); err != nil {
		return err
	}
	size, err := parseInt(s.raw[colBodySize])
	r.BodySize = int(size)
	return err
}

// scan reads the current row of rows into r. A row whose headers do not decode gets
// r.Corrupt; only a database or conversion failure is an error.
func (s *rowScanner) scan(rows *sql.Rows, r *outbox.Record) error {
	if err := rows.Scan(s.dest[:numRecordColumns]...); err != nil {
		return err
	}
	return s.decode(r)
}

// decode fills r from the scanned record columns.
func (s *rowScanner) decode(r *outbox.Record) error {
	raw := &s.raw
	if len(raw[colID]) != len(r.ID) {
		return fmt.Errorf("mysql: id of %d bytes (want %d)", len(raw[colID]), len(r.ID))
	}
	copy(r.ID[:], raw[colID])
	setString(&r.MessageUUID, raw[colMessageUUID])
	r.Lane = outbox.Unordered
	if raw[colLane] != nil {
		lane, err := parseInt(raw[colLane])
		if err != nil {
			return fmt.Errorf("mysql: row %s: lane: %w", r.ID, err)
		}
		r.Lane = laneOf(int(lane)) // a parked row's stored lane is parkedLane(lane)
	}
	r.Seq = 0 // NULL: an unordered row (seq -1)
	if raw[colSeq] != nil {
		seq, err := parseInt(raw[colSeq])
		if err != nil {
			return fmt.Errorf("mysql: row %s: seq: %w", r.ID, err)
		}
		r.Seq = seq
	}
	setString(&r.OrderingKey, raw[colOrderingKey])
	setString(&r.Transport, raw[colTransport])
	// The rows of one read mostly share a topic: one string for them.
	if s.destination != string(raw[colDestination]) {
		s.destination = string(raw[colDestination])
	}
	r.Destination = s.destination
	setString(&r.MessageType, raw[colMessageType])
	sqlrows.CopyBytes(r, raw[colHeaders], raw[colBody])
	r.BodySize = 0
	setString(&r.TenantID, raw[colTenantID])
	var err error
	if r.CreatedAt, err = parseTime(raw[colCreatedAt]); err != nil {
		return err
	}
	r.DeliverAt = r.CreatedAt // NULL: deliver_at = created_at
	if raw[colDeliverAt] != nil {
		if r.DeliverAt, err = parseTime(raw[colDeliverAt]); err != nil {
			return err
		}
	}
	attempts, err := parseInt(raw[colAttempts])
	if err != nil {
		return fmt.Errorf("mysql: row %s: attempts: %w", r.ID, err)
	}
	r.Attempts = int(attempts)
	setString(&r.LastError, raw[colLastError])
	switch string(raw[colStatus]) {
	case "", string(outbox.StatusPending): // NULL: pending
		r.Status = outbox.StatusPending
	case string(outbox.StatusParked):
		r.Status = outbox.StatusParked
	default:
		r.Status = outbox.Status(raw[colStatus])
	}
	r.ClaimToken = outbox.Token{}
	if len(raw[colClaimToken]) == len(r.ClaimToken) {
		copy(r.ClaimToken[:], raw[colClaimToken])
	}
	if r.ClaimExpiresAt, err = parseNullTime(raw[colClaimExpiresAt]); err != nil {
		return err
	}
	r.Corrupt = nil
	if err := headercodec.Validate(r.Headers); err != nil {
		r.Corrupt = &outbox.CorruptRowError{ID: r.ID, Column: "headers", Err: err}
	}
	return nil
}
