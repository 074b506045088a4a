package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Metadata keys the test messages carry so that a consumer can check order without
// decoding payloads.
const (
	// KeyMetadata holds the message's ordering key as the test wrote it.
	KeyMetadata = "chaos_key"
	// SeqMetadata holds the message's position (0, 1, 2, ...) among the messages of its key.
	SeqMetadata = "chaos_seq"
)

// Recorder collects deliveries from any number of goroutines and checks them against
// at-least-once semantics with per-key order:
//   - a message seen again (same UUID) is a duplicate, counted, never an error;
//   - the first deliveries of one key must come in increasing sequence: a message whose
//     first delivery comes after the first delivery of a later message of the same key
//     is an order violation. A redelivered earlier message (a replay after a crash) is a
//     duplicate, not a violation.
type Recorder struct {
	mu         sync.Mutex
	seen       map[string]int // UUID -> deliveries
	maxSeq     map[string]int // key -> greatest sequence first-delivered so far
	violations []string
	dups       int
	keyedDups  int
	total      int
	changed    chan struct{}
	last       time.Time
	firsts     map[string][]time.Time // key -> times of first deliveries
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		seen:    make(map[string]int),
		maxSeq:  make(map[string]int),
		firsts:  make(map[string][]time.Time),
		changed: make(chan struct{}, 1),
	}
}

// Record notes one delivery. key may be "" (unordered message: no order check); seq < 0
// means no sequence.
func (r *Recorder) Record(uuid, key string, seq int) {
	r.mu.Lock()
	r.total++
	r.last = time.Now()
	n := r.seen[uuid]
	r.seen[uuid] = n + 1
	if n > 0 {
		r.dups++
		if key != "" {
			r.keyedDups++
		}
	} else if key != "" && seq >= 0 {
		r.firsts[key] = append(r.firsts[key], r.last)
		prev, ok := r.maxSeq[key]
		switch {
		case !ok || seq > prev:
			r.maxSeq[key] = seq
		default:
			if len(r.violations) < 100 {
				r.violations = append(r.violations,
					fmt.Sprintf("key %q: first delivery of seq %d after seq %d", key, seq, prev))
			} else {
				r.violations = append(r.violations[:100], "...")
			}
		}
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// RecordMessage records a Watermill message carrying KeyMetadata and SeqMetadata.
func (r *Recorder) RecordMessage(msg *message.Message) {
	key, seq := KeySeq(msg)
	r.Record(msg.UUID, key, seq)
}

// KeySeq reads the test's key and sequence from msg's metadata (seq -1 when absent).
func KeySeq(msg *message.Message) (string, int) {
	seq := -1
	if s := msg.Metadata.Get(SeqMetadata); s != "" {
		if v, err := strconv.Atoi(s); err == nil {
			seq = v
		}
	}
	return msg.Metadata.Get(KeyMetadata), seq
}

// FirstAfter returns, per key, when its first new message (not a duplicate) arrived at
// or after t; keys with none are absent. It shows when a key's lane resumed after an
// event such as a crash.
func (r *Recorder) FirstAfter(t time.Time) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Time)
	for k, ts := range r.firsts {
		i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(t) })
		if i < len(ts) {
			out[k] = ts[i]
		}
	}
	return out
}

// Unique returns the number of distinct messages delivered.
func (r *Recorder) Unique() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// Summary is a snapshot of what the recorder saw.
type Summary struct {
	Deliveries int      // every delivery, duplicates included
	Unique     int      // distinct UUIDs
	Duplicates int      // Deliveries - Unique
	KeyedDups  int      // the duplicates of messages with a key (ordered lanes)
	Violations []string // per-key order violations (first 100)
}

func (s Summary) String() string {
	return fmt.Sprintf("deliveries=%d unique=%d duplicates=%d (keyed %d) order_violations=%d",
		s.Deliveries, s.Unique, s.Duplicates, s.KeyedDups, len(s.Violations))
}

// Summary returns a snapshot.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Summary{
		Deliveries: r.total,
		Unique:     len(r.seen),
		Duplicates: r.dups,
		KeyedDups:  r.keyedDups,
		Violations: append([]string(nil), r.violations...),
	}
}

// Missing returns the UUIDs among want that were never delivered, sorted.
func (r *Recorder) Missing(want []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range want {
		if r.seen[u] == 0 {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// WaitUnique waits until at least n distinct messages were delivered, or until no new
// delivery arrived for idle (progress stalled) or deadline passed. It reports whether n
// was reached.
func (r *Recorder) WaitUnique(n int, idle, deadline time.Duration) bool {
	end := time.Now().Add(deadline)
	start := time.Now()
	for {
		r.mu.Lock()
		got, last := len(r.seen), r.last
		r.mu.Unlock()
		if got >= n {
			return true
		}
		if last.IsZero() {
			last = start
		}
		now := time.Now()
		if now.After(end) || now.Sub(last) > idle {
			return false
		}
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// UniqueName returns prefix followed by 12 random hex characters (queue, topic and user
// names private to one test).
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
