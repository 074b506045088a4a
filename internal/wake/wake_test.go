package wake

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		commits []outbox.Commit
		want    string
	}{
		{[]outbox.Commit{{Unordered: 2}}, "u"},
		{[]outbox.Commit{{Lanes: []int{17, 3}}, {Lanes: []int{3}, Unordered: 1}}, "u,3,17"},
		{[]outbox.Commit{{Lanes: []int{0, 63, 64, 4095}}}, "0,63,64,4095"},
	} {
		var s Set
		for _, c := range tc.commits {
			s.Add(c)
		}
		got := string(s.AppendPayload(nil))
		if got != tc.want {
			t.Errorf("%+v: payload %q, want %q", tc.commits, got, tc.want)
		}
		c := Decode(got, 4096)
		var back Set
		back.Add(c)
		if again := string(back.AppendPayload(nil)); again != got {
			t.Errorf("decode(%q) = %+v, encodes as %q", got, c, again)
		}
	}
}

func TestPayloadTooLongIsAll(t *testing.T) {
	var s Set
	c := outbox.Commit{}
	for l := range 4096 {
		c.Lanes = append(c.Lanes, l)
	}
	s.Add(c)
	if got := string(s.AppendPayload([]byte("x"))); got != "x*" {
		t.Fatalf("payload %q, want x*", got)
	}
}

func TestDecodeWakesEverythingOnDoubt(t *testing.T) {
	for _, p := range []string{"", "*", "u,zz", "5,70", "-1"} {
		c := Decode(p, 8)
		if c.Unordered != 1 || !slices.Equal(c.Lanes, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
			t.Errorf("Decode(%q) = %+v, want every lane and unordered", p, c)
		}
	}
	if c := Decode("2,5", 8); c.Unordered != 0 || !slices.Equal(c.Lanes, []int{2, 5}) {
		t.Errorf("Decode(2,5) = %+v", c)
	}
}

// A payload of many entries (a multi-megabyte message on the wake-up topic) never
// becomes more lanes than the table has: longer than any sender writes, it wakes
// everything; repeated lanes count once.
func TestDecodeBounded(t *testing.T) {
	huge := strings.Repeat("1,", 4<<20) + "1"
	if c := Decode(huge, 8); c.Unordered != 1 || !slices.Equal(c.Lanes, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("Decode(4 MiB of lanes) = %d lanes, want every lane once", len(c.Lanes))
	}
	if c := Decode("3,1,3,3,u,1,u", 8); c.Unordered != 1 || !slices.Equal(c.Lanes, []int{3, 1}) {
		t.Errorf("Decode(repeated lanes) = %+v, want lanes 3 and 1 once", c)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "*", "u", "u,3,17", "1,1,1", "5,70", "-1", "0,,1"} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, payload string, lanes int) {
		if lanes < 1 || lanes > 4096 {
			return
		}
		c := Decode(payload, lanes)
		if len(c.Lanes) > lanes {
			t.Fatalf("Decode(%q, %d) = %d lanes", payload, lanes, len(c.Lanes))
		}
		seen := map[int]bool{}
		for _, l := range c.Lanes {
			if l < 0 || l >= lanes || seen[l] {
				t.Fatalf("Decode(%q, %d): lane %d out of range or repeated", payload, lanes, l)
			}
			seen[l] = true
		}
	})
}

func TestSetReset(t *testing.T) {
	var s Set
	if !s.Empty() {
		t.Fatal("zero set not empty")
	}
	s.Add(outbox.Commit{Lanes: []int{1}})
	s.AddAll()
	s.Reset()
	if !s.Empty() || len(s.AppendPayload(nil)) != 0 {
		t.Fatal("reset set not empty")
	}
}

type sends struct {
	mu  sync.Mutex
	got []string
	at  []time.Time
}

func (s *sends) send(_ context.Context, p []byte) error {
	s.mu.Lock()
	s.got = append(s.got, string(p))
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	return nil
}

func (s *sends) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// The first commit after a quiet interval is sent at once; a burst is merged into a
// few sends, never more than one per interval; Close sends what is pending.
func TestCoalescer(t *testing.T) {
	var s sends
	c := NewCoalescer(s.send, 50*time.Millisecond, 50*time.Millisecond, time.Second, watermill.NopLogger{})
	t0 := time.Now()
	c.Add(outbox.Commit{Lanes: []int{1}})
	for len(s.list()) == 0 {
		if time.Since(t0) > time.Second {
			t.Fatal("first commit not sent")
		}
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(t0); d > 40*time.Millisecond {
		t.Errorf("first send after %s, want at once", d)
	}
	for i := range 1000 {
		c.Add(outbox.Commit{Lanes: []int{i % 8}, Unordered: i % 2})
	}
	c.Add(outbox.Commit{}) // nothing: ignored
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := s.list()
	if len(got) < 2 || len(got) > 3 {
		t.Fatalf("sends %q: want the first and one or two merged ones", got)
	}
	var all Set
	for _, p := range got[1:] {
		all.Add(Decode(p, 8))
	}
	if p := string(all.AppendPayload(nil)); p != "u,0,1,2,3,4,5,6,7" {
		t.Errorf("merged sends cover %q", p)
	}
	s.mu.Lock()
	for i := 1; i < len(s.at); i++ {
		if d := s.at[i].Sub(s.at[i-1]); d < 45*time.Millisecond && i < len(s.at)-1 {
			t.Errorf("sends %d and %d %s apart, want at least the interval", i-1, i, d)
		}
	}
	s.mu.Unlock()
	c.Add(outbox.Commit{Unordered: 1}) // after Close: dropped, no panic
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

type failLog struct {
	watermill.NopLogger
	mu     sync.Mutex
	errors []string
}

func (l *failLog) Error(msg string, _ error, _ watermill.LogFields) {
	l.mu.Lock()
	l.errors = append(l.errors, msg)
	l.mu.Unlock()
}

// A failing send is logged once until a send succeeds again.
func TestCoalescerLogsFailureOnce(t *testing.T) {
	log := &failLog{}
	var fail sync.Mutex
	failing := true
	send := func(context.Context, []byte) error {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return context.DeadlineExceeded
		}
		return nil
	}
	c := NewCoalescer(send, time.Millisecond, time.Millisecond, time.Second, log)
	for range 5 {
		c.Add(outbox.Commit{Unordered: 1})
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.errors) != 1 || !strings.Contains(log.errors[0], "wake-up failed") {
		t.Fatalf("errors logged: %q, want one", log.errors)
	}
}

// During a burst the spacing doubles up to the maximum; after a quiet spell the next
// commit is sent at once again.
func TestCoalescerBackOffDuringBurst(t *testing.T) {
	var s sends
	c := NewCoalescer(s.send, 5*time.Millisecond, 40*time.Millisecond, time.Second, watermill.NopLogger{})
	defer c.Close()
	start := time.Now()
	for time.Since(start) < 400*time.Millisecond {
		c.Add(outbox.Commit{Unordered: 1})
		time.Sleep(200 * time.Microsecond)
	}
	burst := len(s.list())
	// 0, 5, 15, 35, 75, then every 40 ms: about 13 in 400 ms; a fixed 5 ms would be 80.
	if burst < 6 || burst > 25 {
		t.Errorf("%d sends during a 400 ms burst, want about 13", burst)
	}
	time.Sleep(100 * time.Millisecond) // quiet: the hold resets
	t0 := time.Now()
	c.Add(outbox.Commit{Lanes: []int{3}})
	for len(s.list()) <= burst+1 && time.Since(t0) < time.Second {
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	last := s.at[len(s.at)-1]
	s.mu.Unlock()
	if d := last.Sub(t0); d > 4*time.Millisecond+10*time.Millisecond {
		t.Errorf("first commit after a quiet spell sent after %s, want at once", d)
	}
}

// Commits that come one at a time, back to back (each one after the previous one was
// sent, as a writer that waits for its message), never see the hold grow.
func TestCoalescerNoBackOffForSingleCommits(t *testing.T) {
	var s sends
	c := NewCoalescer(s.send, 5*time.Millisecond, 200*time.Millisecond, time.Second, watermill.NopLogger{})
	defer c.Close()
	var worst time.Duration
	for i := range 30 {
		t0 := time.Now()
		c.Add(outbox.Commit{Lanes: []int{i % 8}})
		for len(s.list()) <= i && time.Since(t0) < time.Second {
			time.Sleep(100 * time.Microsecond)
		}
		worst = max(worst, time.Since(t0))
	}
	if worst > 100*time.Millisecond {
		t.Errorf("a single commit waited %s for its send, want at most about the 5 ms interval", worst)
	}
}
