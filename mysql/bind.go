package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"unsafe"
)

// Statements other than Insert's large chunks are sent as text with their values
// inlined, so each is one round trip whatever the DSN says (the driver would otherwise
// prepare, execute and close a statement for every call unless interpolateParams is
// set). Only values of the types below are inlined, and each is rendered so that no
// character of the value reaches the SQL text: integers as digits, instants as quoted
// digits the store formatted, and bytes and strings as hex literals.

// sqlTime is an instant formatted by appendTime ('YYYY-MM-DD HH:MM:SS.ffffff').
type sqlTime string

// bind returns q with each '?' outside quoted identifiers and string literals replaced
// by the next argument. A count mismatch or an unsupported type is a bug in this
// package, so it panics.
func bind(q string, args ...any) string {
	if len(args) == 0 {
		return q
	}
	b := make([]byte, 0, len(q)+len(args)*40)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0 // a doubled quote reopens at the next character
			}
		case c == '`' || c == '\'':
			quote = c
		case c == '?':
			if n == len(args) {
				panic(fmt.Sprintf("mysql: bind: more placeholders than %d arguments in %q", len(args), q))
			}
			b = appendLiteral(b, args[n])
			n++
			continue
		}
		b = append(b, c)
	}
	if n != len(args) {
		panic(fmt.Sprintf("mysql: bind: %d placeholders for %d arguments in %q", n, len(args), q))
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func appendLiteral(b []byte, v any) []byte {
	switch v := v.(type) {
	case int64:
		return strconv.AppendInt(b, v, 10)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case sqlTime:
		b = append(b, '\'')
		b = append(b, v...)
		return append(b, '\'')
	case []byte:
		if v == nil {
			return append(b, "NULL"...)
		}
		return appendHex(b, v)
	case string:
		if v == "" {
			return append(b, "''"...)
		}
		b = append(b, "X'"...)
		b = hex.AppendEncode(b, unsafe.Slice(unsafe.StringData(v), len(v)))
		return append(b, '\'')
	default:
		panic(fmt.Sprintf("mysql: bind: unsupported argument type %T", v))
	}
}

// execQuerier is a *sql.DB or a *sql.Tx.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func execB(ctx context.Context, e execQuerier, q string, args ...any) (sql.Result, error) {
	return e.ExecContext(ctx, bind(q, args...))
}

func queryB(ctx context.Context, e execQuerier, q string, args ...any) (*sql.Rows, error) {
	return e.QueryContext(ctx, bind(q, args...))
}

func queryRowB(ctx context.Context, e execQuerier, q string, args ...any) *sql.Row {
	return e.QueryRowContext(ctx, bind(q, args...))
}
