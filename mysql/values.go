package mysql

import (
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Instants travel as text the store formats and parses itself, in UTC at microsecond
// precision. Binding a time.Time would let the driver convert it to the DSN's loc, and
// scanning DATETIME would depend on parseTime; text does neither. DATETIME is not
// converted by the session time_zone, so no setting of the connection moves an instant.
const timeLayoutLen = len("2006-01-02 15:04:05.000000")

// appendTime appends t as 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC, truncated to microseconds:
// for a DATETIME(6) column c, c <= t exactly when c <= trunc(t), so comparisons stay
// exact at every boundary).
func appendTime(b []byte, t time.Time) ([]byte, error) {
	t = t.UTC()
	year, month, day := t.Date()
	if err := checkYear(t, year); err != nil {
		return b, err
	}
	hour, minute, sec := t.Clock()
	b = appendInt(b, year, 4)
	b = append(b, '-')
	b = appendInt(b, int(month), 2)
	b = append(b, '-')
	b = appendInt(b, day, 2)
	b = append(b, ' ')
	b = appendInt(b, hour, 2)
	b = append(b, ':')
	b = appendInt(b, minute, 2)
	b = append(b, ':')
	b = appendInt(b, sec, 2)
	b = append(b, '.')
	return appendInt(b, t.Nanosecond()/1000, 6), nil
}

// checkTime reports whether appendTime can write t, without writing it.
func checkTime(t time.Time) error { return checkYear(t, t.UTC().Year()) }

func checkYear(t time.Time, year int) error {
	if year < 1 || year > 9999 {
		return fmt.Errorf("instant %s is outside the DATETIME range (years 1..9999)", t.Format(time.RFC3339Nano))
	}
	return nil
}

func appendInt(b []byte, v, width int) []byte {
	var tmp [8]byte
	for i := width - 1; i >= 0; i-- {
		tmp[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, tmp[:width]...)
}

// timeArg formats t as a bound instant.
func timeArg(t time.Time) (sqlTime, error) {
	var buf [timeLayoutLen]byte
	b, err := appendTime(buf[:0], t)
	return sqlTime(b), err
}

// parseTime parses the text form of a DATETIME(6) ('YYYY-MM-DD HH:MM:SS[.ffffff]') as a
// UTC instant. It also accepts the RFC 3339 text database/sql makes when a parseTime=true
// connection hands over a time.Time (its wall clock is the stored UTC value).
func parseTime(b []byte) (time.Time, error) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || (b[10] != ' ' && b[10] != 'T') || b[13] != ':' || b[16] != ':' {
		return time.Time{}, fmt.Errorf("mysql: cannot parse instant %q", b)
	}
	num := func(s []byte) int {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(b[0:4]), num(b[5:7]), num(b[8:10])
	hour, minute, sec := num(b[11:13]), num(b[14:16]), num(b[17:19])
	nsec := 0
	rest := b[19:]
	if len(rest) > 0 && rest[0] == '.' {
		digits := 0
		for _, c := range rest[1:] {
			if c < '0' || c > '9' {
				break
			}
			if digits < 9 {
				nsec = nsec*10 + int(c-'0')
			}
			digits++
		}
		for i := min(digits, 9); i < 9; i++ {
			nsec *= 10
		}
		rest = rest[1+digits:]
	}
	_ = rest // an offset after a time.Time's text is ignored: the wall clock is UTC
	if year < 0 || month < 1 || day < 1 || hour < 0 || minute < 0 || sec < 0 {
		return time.Time{}, fmt.Errorf("mysql: cannot parse instant %q", b)
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), nil
}

// parseNullTime is parseTime with NULL as the zero time.
func parseNullTime(b sql.RawBytes) (time.Time, error) {
	if b == nil {
		return time.Time{}, nil
	}
	return parseTime(b)
}

func parseInt(b []byte) (int64, error) {
	// Avoids string(b)'s allocation for the common short case.
	var n int64
	neg := false
	s := b
	if len(s) > 0 && s[0] == '-' {
		neg, s = true, s[1:]
	}
	if len(s) == 0 || len(s) > 18 {
		return strconv.ParseInt(string(b), 10, 64)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return strconv.ParseInt(string(b), 10, 64)
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// appendHex appends a binary literal X'..' of b: ids and tokens are the store's own
// 16-byte values, so inlining them is safe and avoids a placeholder per id.
func appendHex(dst []byte, b []byte) []byte {
	dst = append(dst, "X'"...)
	dst = hex.AppendEncode(dst, b)
	return append(dst, '\'')
}

// appendIDList appends "X'..',X'..'" for ids.
func appendIDList(dst []byte, ids []outbox.ID) []byte {
	for i := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendHex(dst, ids[i][:])
	}
	return dst
}

// setString sets *dst to the text of b, keeping the old string when equal so that reused
// records do not allocate for repeated values (destinations, transports).
func setString(dst *string, b []byte) {
	if *dst != string(b) {
		*dst = string(b)
	}
}
