package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// ID identifies one outbox row: a 16-byte ULID in network (big-endian) byte order, so
// that byte order is time order. IDs made by one process are strictly increasing.
type ID [16]byte

// Token is a fencing token: 16 random bytes that prove ownership of a row claim or a
// lane lease. The zero Token means "none".
type Token [16]byte

var idSource = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
	last    ulid.ULID
	scratch ulid.ULID
}{entropy: ulid.Monotonic(rand.Reader, 0)}

// NewID returns a new ID, strictly greater than every ID this process made before. It
// is safe for concurrent use.
func NewID() ID {
	idSource.Lock()
	defer idSource.Unlock()
	ms := ulid.Timestamp(time.Now())
	if last := idSource.last.Time(); ms < last {
		// The wall clock stepped back: stay on the last millisecond so ids keep rising.
		ms = last
	}
	for {
		// Built in idSource.scratch rather than by ulid.New, whose local ULID escapes
		// through its io.Reader parameter: one heap allocation per id otherwise.
		id := &idSource.scratch
		err := id.SetTime(ms)
		if err == nil {
			err = idSource.entropy.MonotonicRead(ms, id[6:])
		}
		if err == nil && id.Compare(idSource.last) > 0 {
			idSource.last = *id
			return ID(*id)
		}
		// Entropy exhausted within one millisecond (practically never): move on to the next.
		ms++
	}
}

// IDFromTime returns the smallest ID whose timestamp is t (truncated to milliseconds).
// It is useful as an exclusive cursor ("rows written after t").
func IDFromTime(t time.Time) ID {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(t))
	return ID(u)
}

// ParseID parses the 26-character ULID text form (as made by [ID.String]).
func ParseID(s string) (ID, error) {
	u, err := ulid.ParseStrict(s)
	if err != nil {
		return ID{}, fmt.Errorf("outbox: parse id %q: %w", s, err)
	}
	return ID(u), nil
}

// String returns the canonical 26-character ULID text form.
func (id ID) String() string { return ulid.ULID(id).String() }

// Time returns the millisecond timestamp embedded in the ID.
func (id ID) Time() time.Time { return ulid.Time(ulid.ULID(id).Time()).UTC() }

// IsZero reports whether id is the zero ID (never a valid row id).
func (id ID) IsZero() bool { return id == ID{} }

// Compare returns -1, 0 or +1 as id sorts before, equal to or after other.
func (id ID) Compare(other ID) int { return ulid.ULID(id).Compare(ulid.ULID(other)) }

// NewToken returns a fresh random fencing token.
func NewToken() Token {
	var t Token
	if _, err := io.ReadFull(rand.Reader, t[:]); err != nil {
		panic("outbox: crypto/rand failed: " + err.Error())
	}
	return t
}

// IsZero reports whether t is the zero token ("no claim").
func (t Token) IsZero() bool { return t == Token{} }

// String returns the token as 32 lowercase hex digits.
func (t Token) String() string { return hex.EncodeToString(t[:]) }
