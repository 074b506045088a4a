package outbox_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func TestNewIDMonotonicAcrossGoroutines(t *testing.T) {
	const workers, perWorker = 8, 2000
	var (
		mu     sync.Mutex
		global []outbox.ID // appended under mu right after NewID: the global call order
		wg     sync.WaitGroup
	)
	results := make([][]outbox.ID, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			own := make([]outbox.ID, 0, perWorker)
			for i := 0; i < perWorker; i++ {
				if i%2 == 0 {
					own = append(own, outbox.NewID())
					continue
				}
				mu.Lock()
				id := outbox.NewID()
				global = append(global, id)
				mu.Unlock()
				own = append(own, id)
			}
			results[w] = own
		}(w)
	}
	wg.Wait()

	seen := make(map[outbox.ID]bool, workers*perWorker)
	for w, own := range results {
		for i, id := range own {
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
			if i > 0 && own[i-1].Compare(id) >= 0 {
				t.Fatalf("worker %d: id %d (%s) not after id %d (%s)", w, i, id, i-1, own[i-1])
			}
		}
	}
	for i := 1; i < len(global); i++ {
		if bytes.Compare(global[i-1][:], global[i][:]) >= 0 {
			t.Fatalf("ids made one after another are not increasing: %s then %s", global[i-1], global[i])
		}
	}
}

func TestNewIDMonotonicAcrossMilliseconds(t *testing.T) {
	prev := outbox.NewID()
	start := prev.Time()
	crossed := 0
	deadline := time.Now().Add(2 * time.Second)
	for crossed < 5 && time.Now().Before(deadline) {
		id := outbox.NewID()
		if prev.Compare(id) >= 0 {
			t.Fatalf("%s not after %s", id, prev)
		}
		if id.Time().After(prev.Time()) {
			crossed++
		}
		prev = id
	}
	if crossed < 5 {
		t.Fatalf("only %d millisecond boundaries crossed since %v", crossed, start)
	}
}

func TestIDTimeOrderIsByteOrder(t *testing.T) {
	base := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	var prev outbox.ID
	for i, d := range []time.Duration{0, time.Millisecond, time.Second, time.Hour, 24 * 365 * time.Hour} {
		id := outbox.IDFromTime(base.Add(d))
		if !id.Time().Equal(base.Add(d)) {
			t.Fatalf("IDFromTime(%v).Time() = %v", base.Add(d), id.Time())
		}
		if i > 0 {
			if bytes.Compare(prev[:], id[:]) >= 0 || prev.Compare(id) >= 0 {
				t.Fatalf("later time %v does not sort after: %x vs %x", base.Add(d), id, prev)
			}
			if prev.String() >= id.String() {
				t.Fatalf("text form does not sort like time: %s vs %s", prev, id)
			}
		}
		prev = id
	}

	// A new id sorts after the cursor of its own millisecond and before the next one.
	before := time.Now()
	id := outbox.NewID()
	if lo := outbox.IDFromTime(before.Add(-time.Millisecond)); lo.Compare(id) >= 0 {
		t.Fatalf("NewID %s sorts before IDFromTime(now-1ms) %s", id, lo)
	}
	if hi := outbox.IDFromTime(time.Now().Add(2 * time.Millisecond)); id.Compare(hi) >= 0 {
		t.Fatalf("NewID %s sorts after IDFromTime(now+2ms) %s", id, hi)
	}
	if got := id.Time(); got.Location() != time.UTC || got.Before(before.Truncate(time.Millisecond)) {
		t.Fatalf("Time() = %v, want UTC at or after %v", got, before)
	}
}

func TestIDStringParseRoundTrip(t *testing.T) {
	for i := 0; i < 100; i++ {
		id := outbox.NewID()
		s := id.String()
		if len(s) != 26 {
			t.Fatalf("String() = %q, want 26 characters", s)
		}
		back, err := outbox.ParseID(s)
		if err != nil {
			t.Fatalf("ParseID(%q): %v", s, err)
		}
		if back != id {
			t.Fatalf("ParseID(%q) = %x, want %x", s, back, id)
		}
	}
	if id, err := outbox.ParseID("00000000000000000000000000"); err != nil || !id.IsZero() {
		t.Fatalf("ParseID(zeros) = %x, %v", id, err)
	}
	if outbox.NewID().IsZero() {
		t.Fatal("a new id is zero")
	}
}

func TestParseIDErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"01ARZ3NDEKTSV4RRFFQ69G5FA",   // 25 characters
		"01ARZ3NDEKTSV4RRFFQ69G5FAVX", // 27 characters
		"01ARZ3NDEKTSV4RRFFQ69G5FAU",  // U is not in the alphabet
		"01ARZ3NDEKTSV4RRFFQ69G5FA!",
		"81ARZ3NDEKTSV4RRFFQ69G5FAV", // more than 128 bits
	} {
		id, err := outbox.ParseID(s)
		if err == nil {
			t.Errorf("ParseID(%q) = %s, want error", s, id)
			continue
		}
		if !strings.Contains(err.Error(), "outbox: parse id") || !strings.Contains(err.Error(), s) {
			t.Errorf("ParseID(%q) error %q does not name the input", s, err)
		}
		if !id.IsZero() {
			t.Errorf("ParseID(%q) returned %x with its error", s, id)
		}
	}
}

func TestToken(t *testing.T) {
	a, b := outbox.NewToken(), outbox.NewToken()
	if a.IsZero() || a == b {
		t.Fatalf("tokens not fresh: %s %s", a, b)
	}
	if s := a.String(); len(s) != 32 || strings.ToLower(s) != s {
		t.Fatalf("Token.String() = %q, want 32 lowercase hex digits", s)
	}
	if !(outbox.Token{}).IsZero() {
		t.Fatal("zero token not IsZero")
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = outbox.NewID()
	}
}

func BenchmarkNewIDParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = outbox.NewID()
		}
	})
}

// The publisher counts on NewID allocating nothing (one allocation per published message).
func TestNewIDDoesNotAllocate(t *testing.T) {
	if allocs := testing.AllocsPerRun(1000, func() { _ = outbox.NewID() }); allocs != 0 {
		t.Fatalf("NewID made %v allocations, want 0", allocs)
	}
}
