package sqlserver

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"unicode/utf8"

	mssql "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

const (
	// BulkThreshold is the most rows Insert writes with parameterised INSERT statements;
	// more rows (or more than BulkBytes of payload) go through bulk copy, whose fixed
	// cost (a metadata round trip) only pays off for larger batches.
	BulkThreshold = 64
	// BulkBytes is the payload (headers, bodies and strings) above which Insert uses bulk
	// copy whatever the row count, so huge parameter lists never reach sp_executesql
	// (headers and bodies travel there as hex text, twice their size).
	BulkBytes = 4 << 20

	// maxParams is the most parameters one INSERT statement carries: SQL Server allows
	// 2,100 per request; the margin is room for the driver and future columns.
	maxParams = 2000
	// maxRowsPerInsert is SQL Server's limit on row value expressions in one VALUES list.
	maxRowsPerInsert = 1000
)

// chunk is the half-open range [Start, End) of records one INSERT statement writes.
type chunk struct{ Start, End int }

// planChunks splits rows records of cols parameters each into INSERT statements of at
// most maxParams parameters and maxRowsPerInsert rows, as evenly as possible.
func planChunks(rows, cols int) []chunk {
	if rows <= 0 {
		return nil
	}
	per := min(maxParams/cols, maxRowsPerInsert)
	count := (rows + per - 1) / per
	// Even sizes keep the statements few and similar, so the server reuses their plans.
	size := (rows + count - 1) / count
	out := make([]chunk, 0, count)
	for start := 0; start < rows; start += size {
		out = append(out, chunk{start, min(start+size, rows)})
	}
	return out
}

// useBulk reports whether rows records holding payload bytes go through bulk copy.
func useBulk(rows int, payload int64) bool {
	return rows > BulkThreshold || payload > BulkBytes
}

// Insert writes records in the caller's transaction: parameterised multi-row INSERT for
// small batches, bulk copy (checking constraints, firing triggers) for large ones. Every
// record is validated first; an invalid one fails the call (outbox.ErrInvalidRecord)
// before anything is written.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
	return s.schemaErr(s.insert(ctx, tx, records)) // a missing table names the fix
}

// insert is Insert without the missing-table hint.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, records []outbox.Record) error {
	var payload int64
	for i := range records {
		n, err := s.checkRecord(&records[i])
		if err != nil {
			return fmt.Errorf("sqlserver: insert: %w: record %d (id %s): %s", outbox.ErrInvalidRecord, i, records[i].ID, err)
		}
		payload += n
	}
	if tx == nil {
		return invalidf("insert", "nil transaction")
	}
	if len(records) == 0 {
		return ctx.Err()
	}
	if useBulk(len(records), payload) {
		return wrap("insert (bulk copy)", s.bulkInsert(ctx, tx, records))
	}
	args := make([]any, 0, len(records)*len(insertCols))
	for _, c := range planChunks(len(records), len(insertCols)) {
		args = args[:0]
		for i := c.Start; i < c.End; i++ {
			args = insertParams(args, &records[i])
		}
		if _, err := tx.ExecContext(ctx, s.q.insert(c.End-c.Start), args...); err != nil {
			return wrap("insert", err)
		}
	}
	return nil
}

// checkRecord validates r and returns its payload size.
func (s *Store) checkRecord(r *outbox.Record) (int64, error) {
	switch {
	case r.ID.IsZero():
		return 0, fmt.Errorf("zero id")
	case r.Lane < outbox.Unordered || r.Lane >= s.opts.Lanes:
		return 0, fmt.Errorf("lane %d out of range [%d, %d)", r.Lane, outbox.Unordered, s.opts.Lanes)
	}
	if err := headercodec.Validate(r.Headers); err != nil {
		return 0, fmt.Errorf("headers: %w", err)
	}
	// nvarchar would store U+FFFD for invalid bytes: a silent change of the value.
	for _, f := range [...]struct{ name, v string }{
		{"MessageUUID", r.MessageUUID}, {"OrderingKey", r.OrderingKey}, {"Transport", r.Transport},
		{"Destination", r.Destination}, {"MessageType", r.MessageType}, {"TenantID", r.TenantID},
	} {
		if !utf8.ValidString(f.v) {
			return 0, fmt.Errorf("%s is not valid UTF-8", f.name)
		}
	}
	n := len(r.Headers) + len(r.Body) + len(r.MessageUUID) + len(r.OrderingKey) + len(r.Transport) +
		len(r.Destination) + len(r.MessageType) + len(r.TenantID)
	return int64(n), nil
}

// nullable maps "" to NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// text is a string parameter declared nvarchar(max) whatever its length. go-mssqldb
// declares a plain string as nvarchar(n) of its own length, and SQL Server caches one
// plan per distinct parameter declaration list, so statements whose strings vary in
// length (an error text, an owner, a key, every Insert) would each compile a plan of
// their own and fill the plan cache with single-use entries.
func text(s string) any { return mssql.NVarCharMax(s) }

// payload is a byte string parameter declared varchar(max) whatever its length: its
// hex digits, which the statement turns back into bytes with CONVERT(varbinary(max),
// ..., 2) (see hexParam). go-mssqldb v1.11.2 declares []byte as varbinary(n) of its own
// length and has no varbinary(max) parameter type; ids and tokens are always 16 bytes
// and go as []byte (varbinary(16)).
func payload(b []byte) any { return mssql.VarCharMax(hex.EncodeToString(b)) }

// insertParams appends r's parameters for the parameterised INSERT, in insertCols
// order, each of a fixed declared type (see text, payload and queries.insert): one plan
// per row count. A lane is a typed NULL (int) when unordered; optional strings go as ""
// and the statement stores NULL for them.
func insertParams(args []any, r *outbox.Record) []any {
	lane := sql.NullInt32{}
	if r.Lane != outbox.Unordered {
		lane = sql.NullInt32{Int32: int32(r.Lane), Valid: true}
	}
	deliver := r.DeliverAt
	if deliver.IsZero() {
		deliver = r.CreatedAt
	}
	return append(args, r.ID[:], text(r.MessageUUID), lane, text(r.OrderingKey), text(r.Transport), text(r.Destination),
		text(r.MessageType), payload(r.Headers), payload(r.Body), text(r.TenantID), r.CreatedAt.UTC(), deliver.UTC())
}

// bulkRow appends r's values for bulk copy in insertCols order, as go-mssqldb's bulk
// copy takes them (plain string and []byte; the column types come from the table). A
// nil []byte would be sent as NULL, so an empty body is passed as an empty, non-nil
// slice.
func bulkRow(args []any, r *outbox.Record) []any {
	var lane any
	if r.Lane != outbox.Unordered {
		lane = int32(r.Lane)
	}
	body := r.Body
	if body == nil {
		body = []byte{}
	}
	deliver := r.DeliverAt
	if deliver.IsZero() {
		deliver = r.CreatedAt
	}
	return append(args, r.ID[:], r.MessageUUID, lane, nullable(r.OrderingKey), r.Transport, r.Destination,
		nullable(r.MessageType), r.Headers, body, nullable(r.TenantID), r.CreatedAt.UTC(), deliver.UTC())
}

// bulkInsert streams records through go-mssqldb's bulk copy in tx. The driver quotes
// the table as an object name and keeps well-formed bracketed parts as they are
// ("[schema].[pre]]fix]" names schema "schema", table "pre]fix"), so the name is passed
// quoted by quoteIdent. CHECK_CONSTRAINTS keeps the table's constraints trusted and
// FIRE_TRIGGERS runs its triggers, as a plain INSERT would; no TABLOCK, which would
// block every claimer until the caller commits.
func (s *Store) bulkInsert(ctx context.Context, tx *sql.Tx, records []outbox.Record) (err error) {
	stmt, err := tx.PrepareContext(ctx, mssql.CopyIn(s.q.outbox, mssql.BulkOptions{CheckConstraints: true, FireTriggers: true}, insertCols...))
	if err != nil {
		return err
	}
	defer func() {
		if cerr := stmt.Close(); err == nil {
			err = cerr
		}
	}()
	args := make([]any, 0, len(insertCols))
	for i := range records {
		args = bulkRow(args[:0], &records[i])
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	// No arguments: flush and finish the bulk load; a server error (duplicate id, CHECK
	// violation) surfaces here. Its affected-row count is not checked: go-mssqldb sums
	// every count token of the response, so statements of triggers fired by the load
	// add to it, and a caller's transaction under SET NOCOUNT ON reports none at all.
	_, err = stmt.ExecContext(ctx)
	return err
}
