// Package sqlrows ends the dialects' row iterations (Close) and scans the small result
// sets they share the shape of (leases, members, locked rows), so that each dialect
// keeps only its statements and its error wrapping.
package sqlrows

import (
	"database/sql"

	outbox "github.com/relayer-go/watermill-outbox"
)

// PreallocMax bounds the elements CollectUpTo (and the dialects' record scanners)
// allocate up front for a query's LIMIT.
const PreallocMax = 1024

// Collect scans every row of rows into a new element with scan, then closes rows. The
// error is the first of scan's, the iteration's and Close's.
func Collect[T any](rows *sql.Rows, scan func(rows *sql.Rows, dst *T) error) ([]T, error) {
	return CollectUpTo(rows, nil, 0, scan)
}

// CollectUpTo is Collect for a query that returns at most limit rows: the slice is
// allocated once, at the first row, with room for limit elements (at most
// PreallocMax), instead of growing by doubling (a locked batch of 500 records grew
// through ten allocations and copies of ever larger arrays). A limit of 0 grows as
// append does.
//
// The rows are appended to dst[:0]; a nil dst allocates as above.
func CollectUpTo[T any](rows *sql.Rows, dst []T, limit int, scan func(rows *sql.Rows, dst *T) error) ([]T, error) {
	out := dst[:0]
	for rows.Next() {
		if out == nil && limit > 0 {
			out = make([]T, 0, min(limit, PreallocMax))
		}
		var zero T
		out = append(out, zero)
		if err := scan(rows, &out[len(out)-1]); err != nil {
			rows.Close()
			return nil, err
		}
	}
	if err := Close(rows); err != nil {
		return nil, err
	}
	return out, nil
}

// Close closes rows after an iteration and returns the iteration's error, else Close's.
func Close(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// Strings collects a result of one text column.
func Strings(rows *sql.Rows) ([]string, error) {
	return Collect(rows, func(rows *sql.Rows, s *string) error { return rows.Scan(s) })
}

// Leases collects (lane, owner, token, expires_at) rows whose driver scans expires_at
// into a time.Time (reported in UTC).
func Leases(rows *sql.Rows) ([]outbox.Lease, error) {
	var token sql.RawBytes
	return Collect(rows, func(rows *sql.Rows, l *outbox.Lease) error {
		if err := rows.Scan(&l.Lane, &l.Owner, &token, &l.ExpiresAt, &l.Live); err != nil {
			return err
		}
		copy(l.Token[:], token)
		l.ExpiresAt = l.ExpiresAt.UTC()
		return nil
	})
}

// Append scans up to limit rows of rows into elements appended to dst with scan,
// reusing the storage of dst's spare capacity (a record's buffers), then closes rows.
// On an error it returns dst without the element that failed.
func Append[T any](rows *sql.Rows, dst []T, limit int, scan func(rows *sql.Rows, dst *T) error) ([]T, error) {
	for n := 0; n < limit && rows.Next(); n++ {
		if len(dst) < cap(dst) {
			dst = dst[:len(dst)+1]
		} else {
			var zero T
			dst = append(dst, zero)
		}
		if err := scan(rows, &dst[len(dst)-1]); err != nil {
			rows.Close()
			return dst[:len(dst)-1], err
		}
	}
	return dst, Close(rows)
}

// CopyBytes copies headers and body into r.Headers and r.Body, reusing their storage
// when it is large enough (a record read again into the same slice), else with one
// allocation for both: a fresh record costs one allocation, not two.
func CopyBytes(r *outbox.Record, headers, body []byte) {
	if cap(r.Headers) >= len(headers) && cap(r.Body) >= len(body) && r.Body != nil {
		r.Headers = append(r.Headers[:0], headers...)
		r.Body = append(r.Body[:0], body...)
		return
	}
	buf := make([]byte, len(headers)+len(body))
	n := copy(buf, headers)
	r.Headers = buf[:n:n] // an append to Headers never runs into Body
	r.Body = buf[n:]
	copy(r.Body, body)
}
