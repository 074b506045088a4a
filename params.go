package outbox

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The parameter checks of the store contract live here, once: every dialect calls them
// first, so that a call the contract forbids fails the same way on every engine, with an
// error wrapping ErrInvalidArgument that names the method and the parameter, and
// nothing done. Package outboxtest holds a rule for each.

func invalidArgument(op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidArgument, op, fmt.Sprintf(format, args...))
}

func checkLane(op string, lane, lanes int, unorderedOK bool) error {
	low := 0
	if unorderedOK {
		low = Unordered
	}
	if lane < low || lane >= lanes {
		return invalidArgument(op, "lane %d out of range [%d, %d)", lane, low, lanes)
	}
	return nil
}

func checkInstants(op string, now, until time.Time) error {
	if !until.After(now) {
		return invalidArgument(op, "Until %s is not after Now %s", until.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return nil
}

func checkToken(op, name string, t Token) error {
	if t.IsZero() {
		return invalidArgument(op, "%s is zero", name)
	}
	return nil
}

// Validate checks q for Store.Read over a table of lanes lanes.
func (q ReadQuery) Validate(lanes int) error {
	return checkLane("read", q.Lane, lanes, true)
}

// Validate checks c for Store.Claim over a table of lanes lanes.
func (c ClaimParams) Validate(lanes int) error {
	const op = "claim"
	switch {
	case c.Limit < 1:
		return invalidArgument(op, "Limit must be at least 1, got %d", c.Limit)
	case c.Lane != Unordered && !c.After.IsZero():
		return invalidArgument(op, "After is set for lane %d (only unordered claims take a cursor)", c.Lane)
	}
	if err := checkLane(op, c.Lane, lanes, true); err != nil {
		return err
	}
	if err := checkToken(op, "Token", c.Token); err != nil {
		return err
	}
	return checkInstants(op, c.Now, c.Until)
}

// Validate checks r for Store.Renew over a table of lanes lanes. A zero or stale token
// is not an error: it finds no live claim.
func (r RenewParams) Validate(lanes int) error { return checkLane("renew", r.Lane, lanes, true) }

// Validate checks c for Store.Complete over a table of lanes lanes. A zero or stale
// token is not an error: it deletes nothing.
func (c CompleteParams) Validate(lanes int) error {
	if c.Seqs != nil && len(c.Seqs) != len(c.IDs) {
		return invalidArgument("complete", "Seqs names %d rows and IDs %d; give one Seq per ID, or none", len(c.Seqs), len(c.IDs))
	}
	return checkLane("complete", c.Lane, lanes, true)
}

// Validate checks r for Store.Release over a table of lanes lanes. A zero or stale token
// is not an error: it releases nothing.
func (r ReleaseParams) Validate(lanes int) error { return checkLane("release", r.Lane, lanes, true) }

// Validate checks f for Store.Fail over a table of lanes lanes. A zero or stale token is
// not an error: it changes nothing.
func (f FailParams) Validate(lanes int) error { return checkLane("fail", f.Lane, lanes, true) }

// Validate checks q for Store.ListParked.
func (q ParkedQuery) Validate() error {
	if q.Limit < 1 {
		return invalidArgument("list parked", "Limit must be at least 1, got %d", q.Limit)
	}
	if q.MaxBody < 0 {
		return invalidArgument("list parked", "MaxBody must not be negative, got %d", q.MaxBody)
	}
	return nil
}

// Validate checks f for Store.Requeue and Store.Purge: exactly one selector. A non-nil
// empty IDs is the IDs selector, selecting no row.
func (f ParkedFilter) Validate() error {
	set := 0
	if f.IDs != nil {
		set++
	}
	if f.OrderingKey != nil {
		set++
	}
	if f.All {
		set++
	}
	if set != 1 {
		return invalidArgument("parked filter", "exactly one of IDs, OrderingKey and All must be set (%d set)", set)
	}
	return nil
}

// Validate checks l for Store.AcquireLease and Store.RenewLease over a table of lanes
// lanes. Owner is free text for operators and may be empty; its length limit is the
// dialect's.
func (l LeaseParams) Validate(lanes int) error {
	const op = "lease"
	if err := checkLane(op, l.Lane, lanes, false); err != nil {
		return err
	}
	if err := checkToken(op, "Token", l.Token); err != nil {
		return err
	}
	if err := checkText(op, "Owner", l.Owner, 0); err != nil {
		return err
	}
	return CheckTTL(op, l.TTL)
}

// CheckTTL checks the TTL of a lease or a heartbeat: at least a millisecond, at most
// MaxTTL.
func CheckTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > MaxTTL {
		return invalidArgument(op, "TTL %s out of range [1ms, %s]", ttl, MaxTTL)
	}
	return nil
}

// Validate checks q for Store.Head over a table of lanes lanes.
func (q HeadQuery) Validate(lanes int) error {
	const op = "head"
	if q.Limit < 1 {
		return invalidArgument(op, "Limit must be at least 1, got %d", q.Limit)
	}
	return checkLane(op, q.Lane, lanes, false)
}

// ValidateLane checks the lane of Store.ReleaseLease.
func ValidateLane(op string, lane, lanes int) error { return checkLane(op, lane, lanes, false) }

// ValidateOwner checks the owner of Store.Heartbeat and Store.Leave (a member's key):
// non-empty, valid UTF-8 without NUL, and at most maxRunes characters when maxRunes > 0
// (a dialect passes its column's limit).
func ValidateOwner(op, owner string, maxRunes int) error {
	if owner == "" {
		return invalidArgument(op, "Owner is empty")
	}
	return checkText(op, "Owner", owner, maxRunes)
}

// checkText: valid UTF-8 without NUL, at most maxRunes characters when maxRunes > 0.
func checkText(op, name, v string, maxRunes int) error {
	switch {
	case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
		return invalidArgument(op, "%s %q is not storable text (invalid UTF-8 or NUL)", name, v)
	case maxRunes > 0 && utf8.RuneCountInString(v) > maxRunes:
		return invalidArgument(op, "%s is %d characters long; at most %d fit", name, utf8.RuneCountInString(v), maxRunes)
	}
	return nil
}
