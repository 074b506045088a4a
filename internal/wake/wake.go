// Package wake holds what the cross-process wake-ups share: the set of lanes that
// commits touched, its compact text form (the payload of a PostgreSQL notification and
// of a wake-up message), and the Coalescer that turns a stream of commits into at most
// one send per interval.
//
// The payload is a comma-separated list: "u" when unordered rows were committed, the
// decimal lane numbers, or "*" for every lane and the unordered rows (a list too long
// to send, or a receiver that must look everywhere). "u,3,17" wakes the unordered
// claimers and the workers of lanes 3 and 17.
package wake

import (
	"math/bits"
	"strconv"

	outbox "github.com/relayer-go/watermill-outbox"
)

// maxPayload bounds an encoded lane list; a longer one is sent as "*". PostgreSQL's
// limit is 8,000 bytes; brokers take more, but a wake-up should stay small.
const maxPayload = 1024

// Set accumulates the lanes and unordered rows of commits. The zero value is empty and
// knows no lane count: lanes are grown on demand.
type Set struct {
	lanes     []uint64
	unordered bool
	all       bool
	n         int // lanes set
}

// Add merges c into s.
func (s *Set) Add(c outbox.Commit) {
	if c.Unordered > 0 {
		s.unordered = true
	}
	for _, l := range c.Lanes {
		if l >= 0 {
			s.addLane(l)
		}
	}
}

// addLane marks lane l (>= 0) and reports whether it was new.
func (s *Set) addLane(l int) bool {
	w := l / 64
	for len(s.lanes) <= w {
		s.lanes = append(s.lanes, 0)
	}
	bit := uint64(1) << (uint(l) % 64)
	if s.lanes[w]&bit != 0 {
		return false
	}
	s.lanes[w] |= bit
	s.n++
	return true
}

// AddAll marks every lane and the unordered rows.
func (s *Set) AddAll() { s.all = true }

// Empty reports whether nothing was added since the last Reset.
func (s *Set) Empty() bool { return !s.all && !s.unordered && s.n == 0 }

// Reset empties s, keeping its storage.
func (s *Set) Reset() {
	clear(s.lanes)
	s.unordered, s.all, s.n = false, false, 0
}

// AppendPayload appends the text form of s to dst.
func (s *Set) AppendPayload(dst []byte) []byte {
	start := len(dst)
	if s.all {
		return append(dst, '*')
	}
	if s.unordered {
		dst = append(dst, 'u')
	}
	for i, w := range s.lanes {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			w &^= 1 << uint(b)
			if len(dst) > start {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(i*64+b), 10)
			if len(dst)-start > maxPayload {
				return append(dst[:start], '*')
			}
		}
	}
	return dst
}

// maxDecode bounds a payload Decode reads entry by entry: PostgreSQL's notification
// limit, above anything AppendPayload writes (maxPayload). A longer one wakes
// everything, so that a large message on a wake-up topic costs one look, not millions
// of entries.
const maxDecode = 8000

// Decode parses a payload into the commit to notify for a table of the given lane
// count, each lane at most once. A payload it cannot read, "*", an empty one or one
// longer than any sender writes wakes everything: a spurious wake-up costs one look, a
// missed one a poll interval.
func Decode(payload string, lanes int) outbox.Commit {
	if payload == "" || payload == "*" || len(payload) > maxDecode {
		return All(lanes)
	}
	c := outbox.Commit{}
	var seen Set
	for len(payload) > 0 {
		tok := payload
		if i := indexComma(payload); i >= 0 {
			tok, payload = payload[:i], payload[i+1:]
		} else {
			payload = ""
		}
		if tok == "u" {
			c.Unordered = 1
			continue
		}
		l, err := strconv.Atoi(tok)
		if err != nil || l < 0 || l >= lanes {
			return All(lanes)
		}
		if seen.addLane(l) {
			c.Lanes = append(c.Lanes, l)
		}
	}
	return c
}

func indexComma(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return i
		}
	}
	return -1
}

// All is the commit that wakes every lane worker and the unordered claimers.
func All(lanes int) outbox.Commit {
	c := outbox.Commit{Unordered: 1, Lanes: make([]int, lanes)}
	for i := range c.Lanes {
		c.Lanes[i] = i
	}
	return c
}
