package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// pollSpacing is the interval between commits in the polling measurement: steady
// traffic, so the forwarder polls at PollInterval rather than backing off.
const pollSpacing = 20 * time.Millisecond

// latencySection: one message per transaction; latency is from the start of Commit to
// the target publisher's Publish call. In process: the publisher's Notifier is the
// forwarder (direct dispatch), one transaction after the other. Across processes: a
// child process of this binary runs the forwarder and finds rows by polling (default
// PollInterval), while this process commits one message every pollSpacing.
func latencySection(ctx context.Context, e *engine, cfg config, sec *section) error {
	for run := 0; run < cfg.runs; run++ {
		lat, commits, err := latencyInProcess(ctx, e, cfg.latencySamples)
		if err != nil {
			return fmt.Errorf("in process: %w", err)
		}
		sec.add("direct_p50_ms", "direct dispatch (Notifier = forwarder) p50", "ms", percentile(lat, 0.50))
		sec.add("direct_p99_ms", "direct dispatch p99", "ms", percentile(lat, 0.99))
		sec.add("commit_p50_ms", "Commit call alone p50 (for reference)", "ms", percentile(commits, 0.50))
		lat, err = latencyChild(ctx, e, cfg, wakePolling)
		if err != nil {
			return fmt.Errorf("polling child: %w", err)
		}
		sec.add("polling_p50_ms", fmt.Sprintf("second process, polling (PollInterval %s) p50", forwarder.PollIntervalDefault), "ms", percentile(lat, 0.50))
		sec.add("polling_p99_ms", "second process, polling p99", "ms", percentile(lat, 0.99))
		for _, mode := range wakeContenders(e, cfg) {
			if lat, err = latencyChild(ctx, e, cfg, mode); err != nil {
				return fmt.Errorf("%s child: %w", mode, err)
			}
			sec.add(mode+"_p50_ms", fmt.Sprintf("second process, woken by %s p50", wakeLabel[mode]), "ms", percentile(lat, 0.50))
			sec.add(mode+"_p99_ms", fmt.Sprintf("second process, %s p99", mode), "ms", percentile(lat, 0.99))
		}
		if err := burstFigures(ctx, e, cfg, sec); err != nil {
			return err
		}
	}
	sec.note("%d messages per run and mode; the second-process modes commit one message every %s. "+
		"listen: postgres.Notifier on the writer, postgres.Listener as the child forwarder's Config.Wake; "+
		"amqp_wakeup: wakeup.Notifier/Source over RabbitMQ (fan-out exchange, a queue per process); both with default configs "+
		"(PollInterval %s stays the safety net). Burst: %d one-message commits by %d writers into a fresh table, "+
		"with the notifier linked and its source listening in this process, against the same burst without; %d rounds, every other one in reverse order.",
		cfg.latencySamples, pollSpacing, forwarder.PollIntervalDefault, cfg.burstCommits, burstWriters, cfg.burstRounds)
	return nil
}

var wakeLabel = map[string]string{wakeListen: "LISTEN/NOTIFY", wakeAMQP: "RabbitMQ wake-ups"}

// arrival is one message seen by a target publisher.
type arrival struct {
	uuid string
	at   time.Time
}

type arrivalPublisher struct{ ch chan arrival }

func (p *arrivalPublisher) Publish(_ string, msgs ...*message.Message) error {
	now := time.Now()
	for _, m := range msgs {
		p.ch <- arrival{m.UUID, now}
	}
	return nil
}
func (p *arrivalPublisher) Close() error { return nil }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func latencyInProcess(ctx context.Context, e *engine, samples int) (lat, commits []float64, err error) {
	t, err := e.newOutboxTable(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer t.drop()
	target := &arrivalPublisher{ch: make(chan arrival, 64)}
	fwd, err := forwarder.New(t.store, forwarder.Targets{"": target}, forwarder.Config{StatsInterval: -1}, nil)
	if err != nil {
		return nil, nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fwd.Run(fctx) }()
	defer func() { cancel(); <-done }()
	ob, err := publisher.New(t.store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		return nil, nil, err
	}
	for i := -1; i < samples; i++ { // i = -1: warm-up, not counted
		m := newMessage()
		tx, err := ob.Begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		if err := tx.Publish(destination, m); err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		if err := tx.Commit(ctx); err != nil {
			return nil, nil, err
		}
		c := time.Since(t0)
		select {
		case a := <-target.ch:
			if i >= 0 {
				lat = append(lat, ms(a.at.Sub(t0)))
				commits = append(commits, ms(c))
			}
		case <-time.After(30 * time.Second):
			return nil, nil, errors.New("message not forwarded within 30s")
		case err := <-done:
			return nil, nil, fmt.Errorf("forwarder stopped: %v", err)
		}
	}
	slices.Sort(lat)
	slices.Sort(commits)
	return lat, commits, nil
}

// latencyChild measures commit → publish with the forwarder in a child process that
// learns of commits by mode (wakePolling: by polling alone).
func latencyChild(ctx context.Context, e *engine, cfg config, mode string) ([]float64, error) {
	samples := cfg.latencySamples
	t, err := e.newOutboxTable(ctx)
	if err != nil {
		return nil, err
	}
	defer t.drop()
	topic := t.opts.TablePrefix + "wakeup"
	child, err := startChild(ctx, roleForwarder, e, t.opts.TablePrefix, 0, 0, wakeEnv(mode, cfg.amqpURL, topic)...)
	if err != nil {
		return nil, err
	}
	defer child.stop()
	if _, err := child.waitLine("READY", 30*time.Second); err != nil {
		return nil, err
	}
	if mode != wakePolling {
		if _, err := child.waitLine("LISTENING", 30*time.Second); err != nil {
			return nil, err
		}
	}
	notifier, stopNotifier, err := writerNotifier(mode, t, cfg.amqpURL, topic)
	if err != nil {
		return nil, err
	}
	defer stopNotifier()
	pc := publisher.Config{}
	if notifier != nil {
		pc.Notifiers = []outbox.Notifier{notifier}
	}
	arrivals := make(chan arrival, samples+16)
	go func() {
		for line := range child.lines {
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "ARRIVE" {
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				arrivals <- arrival{f[1], time.Unix(0, ns)}
			}
		}
		close(arrivals)
	}()
	ob, err := publisher.New(t.store, pc, nil)
	if err != nil {
		return nil, err
	}
	commit := func() (string, time.Time, error) {
		m := newMessage()
		tx, err := ob.Begin(ctx)
		if err != nil {
			return "", time.Time{}, err
		}
		if err := tx.Publish(destination, m); err != nil {
			return "", time.Time{}, err
		}
		t0 := time.Now()
		return m.UUID, t0, tx.Commit(ctx)
	}
	// Warm-up: the child has subscribed once the first row arrives.
	if _, _, err := commit(); err != nil {
		return nil, err
	}
	select {
	case <-arrivals:
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("warm-up message not forwarded within 30s; child output:\n%s", child.stderrTail())
	}
	var mu sync.Mutex
	sent := make(map[string]time.Time, samples)
	tick := time.NewTicker(pollSpacing)
	defer tick.Stop()
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < samples; i++ {
			<-tick.C
			uuid, t0, err := commit()
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			sent[uuid] = t0
			mu.Unlock()
		}
		errc <- nil
	}()
	var lat []float64
	var pending []arrival
	timeout := time.After(time.Duration(samples)*pollSpacing + 60*time.Second)
	for len(lat) < samples {
		select {
		case a, ok := <-arrivals:
			if !ok {
				return nil, fmt.Errorf("child exited; output:\n%s", child.stderrTail())
			}
			pending = append(pending, a)
		case err := <-errc:
			if err != nil {
				return nil, err
			}
		case <-timeout:
			return nil, fmt.Errorf("%d of %d messages forwarded in time", len(lat), samples)
		}
		mu.Lock()
		kept := pending[:0]
		for _, a := range pending {
			if t0, ok := sent[a.uuid]; ok {
				lat = append(lat, ms(a.at.Sub(t0)))
			} else {
				kept = append(kept, a) // arrived before its commit was recorded
			}
		}
		pending = kept
		mu.Unlock()
	}
	slices.Sort(lat)
	return lat, nil
}

// Child processes: this binary re-executed with childRoleEnv set.
const (
	childRoleEnv   = "OUTBOXBENCH_CHILD"
	roleForwarder  = "poll-forwarder"
	roleMemory     = "memory-drain"
	childDBEnv     = "OUTBOXBENCH_CHILD_DB"
	childDSNEnv    = "OUTBOXBENCH_CHILD_DSN"
	childPrefixEnv = "OUTBOXBENCH_CHILD_PREFIX"
	childRowsEnv   = "OUTBOXBENCH_CHILD_ROWS"
	childLimitEnv  = "OUTBOXBENCH_CHILD_LIMIT"
)

type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	mu     sync.Mutex
	stderr strings.Builder
	exited chan struct{}
}

// selfCommand is this executable, to run in role with env added to this process's
// environment.
func selfCommand(ctx context.Context, role string, env ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	return cmd, nil
}

// startChild runs this executable in role; it stops when its stdin closes.
func startChild(ctx context.Context, role string, e *engine, prefix string, rows int, limit time.Duration, env ...string) (*childProc, error) {
	cmd, err := selfCommand(ctx, role, append([]string{childDBEnv + "=" + e.name, childDSNEnv + "=" + e.dsn,
		childPrefixEnv + "=" + prefix, childRowsEnv + "=" + strconv.Itoa(rows), childLimitEnv + "=" + limit.String()}, env...)...)
	if err != nil {
		return nil, err
	}
	c := &childProc{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.stderr.Len() < 1<<16 {
			c.stderr.Write(p)
		}
		return len(p), nil
	})
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitLine returns the first stdout line starting with prefix.
func (c *childProc) waitLine(prefix string, d time.Duration) (string, error) {
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return "", fmt.Errorf("child exited before %q; output:\n%s", prefix, c.stderrTail())
			}
			if strings.HasPrefix(line, prefix) {
				return line, nil
			}
		case <-timeout:
			return "", fmt.Errorf("child: no %q within %s; output:\n%s", prefix, d, c.stderrTail())
		}
	}
}

func (c *childProc) stderrTail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// stop closes the child's stdin (its signal to shut down) and waits for it, killing it
// after 20 s.
func (c *childProc) stop() {
	_ = c.stdin.Close()
	go func() {
		for range c.lines {
		}
	}()
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
