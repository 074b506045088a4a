package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
)

// runChild runs one out-of-process role and returns the exit code. The parent passes
// the database, the table prefix and the row count in the environment and stops the
// child by closing its stdin.
func runChild(role string) int {
	if role == roleDatabase {
		return runDatabaseProcess()
	}
	e, err := openEngine(os.Getenv(childDBEnv), os.Getenv(childDSNEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer e.db.Close()
	st, err := e.newStore(outbox.Options{TablePrefix: os.Getenv(childPrefixEnv), Lanes: 64})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	t := &outboxTable{e: e, store: st, opts: st.Options()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	switch role {
	case roleForwarder:
		err = childForwarder(ctx, t)
	case roleMemory:
		n, _ := strconv.Atoi(os.Getenv(childRowsEnv))
		limit, _ := time.ParseDuration(os.Getenv(childLimitEnv))
		err = childMemory(ctx, t, n, limit)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// linePublisher prints "ARRIVE <uuid> <unix nanos>" per message on stdout.
type linePublisher struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (p *linePublisher) Publish(_ string, msgs ...*message.Message) error {
	now := time.Now().UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		fmt.Fprintf(p.w, "ARRIVE %s %d\n", m.UUID, now)
	}
	return p.w.Flush()
}
func (p *linePublisher) Close() error { return nil }

// line prints one line on stdout.
func (p *linePublisher) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, s)
	_ = p.w.Flush()
}

// childForwarder runs a forwarder with the default configuration until stdin closes:
// polling only (no publisher in this process), or woken by the wake-up contender named
// in the environment, in which case it prints LISTENING once the source listens.
func childForwarder(ctx context.Context, t *outboxTable) error {
	pub := &linePublisher{w: bufio.NewWriter(os.Stdout)}
	cfg := forwarder.Config{StatsInterval: -1}
	var logger watermill.LoggerAdapter = listeningLogger{out: pub, once: &sync.Once{}}
	src, stop, err := wakeSource(os.Getenv(childWakeEnv), t, os.Getenv(childAMQPEnv), os.Getenv(childTopicEnv), logger)
	if err != nil {
		return err
	}
	defer stop()
	cfg.Wake = src
	f, err := forwarder.New(t.store, forwarder.Targets{"": pub}, cfg, logger)
	if err != nil {
		return err
	}
	pub.line("READY")
	return f.Run(ctx)
}

type memoryReport struct {
	Rows         int     `json:"rows"`    // backlog at the start
	Drained      int64   `json:"drained"` // messages sent within the time limit
	Rate         float64 `json:"rate"`
	AllocsPerMsg float64 `json:"allocs_per_msg"`
	BytesPerMsg  float64 `json:"bytes_per_msg"`
	StartRSS     uint64  `json:"start_rss"`
	PeakRSS      uint64  `json:"peak_rss"`
	PeakHeap     uint64  `json:"peak_heap"`
}

// childMemory drains the filled table with the default configuration into a no-op
// publisher, for at most limit, and prints "MEMORY <json>": rate, allocations per
// message sent (runtime MemStats over the drain) and VmHWM, the process's peak
// resident set.
func childMemory(ctx context.Context, t *outboxTable, n int, limit time.Duration) error {
	nop := &nopPublisher{}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rep := memoryReport{Rows: n, StartRSS: procStatus("VmRSS:")}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			runtime.ReadMemStats(&ms)
			rep.PeakHeap = max(rep.PeakHeap, ms.HeapInuse)
		}
	}()
	if limit <= 0 {
		limit = time.Hour
	}
	rate, err := runOurs(ctx, t, forwarder.Config{}, 1, nop, nop.Count, n, limit)
	close(stop)
	<-sampled
	if err != nil && !errors.Is(err, errDeadline) {
		return err
	}
	runtime.ReadMemStats(&m1)
	rep.Rate = rate
	rep.Drained = min(nop.Count(), int64(n))
	sent := float64(max(rep.Drained, 1))
	rep.AllocsPerMsg = float64(m1.Mallocs-m0.Mallocs) / sent
	rep.BytesPerMsg = float64(m1.TotalAlloc-m0.TotalAlloc) / sent
	rep.PeakRSS = procStatus("VmHWM:")
	b, _ := json.Marshal(rep)
	fmt.Printf("MEMORY %s\n", b)
	return nil
}

// procStatus returns a /proc/self/status size field in bytes (0 where unavailable).
func procStatus(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
