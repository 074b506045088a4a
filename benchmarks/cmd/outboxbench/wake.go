package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/wakeup"
)

// Cross-process wake-up contenders of the latency section: how the forwarder in the
// child process learns of the parent's commits.
const (
	wakePolling = ""            // none: it polls (default PollInterval)
	wakeListen  = "listen"      // PostgreSQL LISTEN/NOTIFY (postgres.Notifier + Listener)
	wakeAMQP    = "amqp_wakeup" // wake-up messages over RabbitMQ (wakeup.Notifier + Source)
)

// Child environment of the wake-up contenders.
const (
	childWakeEnv  = "OUTBOXBENCH_CHILD_WAKE"
	childAMQPEnv  = "OUTBOXBENCH_CHILD_AMQP"
	childTopicEnv = "OUTBOXBENCH_CHILD_TOPIC"
)

// wakeContenders returns the wake-up contenders that run on e.
func wakeContenders(e *engine, cfg config) []string {
	var w []string
	if e.name == "postgres" {
		w = append(w, wakeListen)
	}
	if cfg.amqpURL != "" {
		w = append(w, wakeAMQP)
	}
	return w
}

// wakeEnv returns the child's environment for contender mode.
func wakeEnv(mode, amqpURL, topic string) []string {
	return []string{childWakeEnv + "=" + mode, childAMQPEnv + "=" + amqpURL, childTopicEnv + "=" + topic}
}

// wakeupConfig is the fan-out configuration of wake-ups: an exchange per topic, a
// non-durable queue per subscribing process.
func wakeupConfig(url string) amqp.Config {
	cfg := amqp.NewNonDurablePubSubConfig(url, amqp.GenerateQueueNameTopicNameWithSuffix(newPrefix()))
	cfg.Publish.ChannelPoolSize = 4 // not a channel opened per Publish
	return cfg
}

// writerNotifier builds the writer's side of contender mode for table t: the notifier
// to link to the publisher, and its cleanup.
func writerNotifier(mode string, t *outboxTable, amqpURL, topic string) (outbox.Notifier, func(), error) {
	switch mode {
	case wakeListen:
		n, err := postgres.NewNotifier(t.e.db, t.opts, postgres.NotifierConfig{}, nil)
		if err != nil {
			return nil, nil, err
		}
		return n, func() { _ = n.Close() }, nil
	case wakeAMQP:
		pub, err := amqp.NewPublisher(wakeupConfig(amqpURL), watermill.NopLogger{})
		if err != nil {
			return nil, nil, err
		}
		n, err := wakeup.NewNotifier(pub, topic, t.opts, wakeup.Config{}, nil)
		if err != nil {
			_ = pub.Close()
			return nil, nil, err
		}
		return n, func() { _ = n.Close(); _ = pub.Close(); deleteExchange(amqpURL, topic) }, nil
	}
	return nil, func() {}, nil
}

// wakeSource builds the forwarder's side of contender mode for table t.
func wakeSource(mode string, t *outboxTable, amqpURL, topic string, logger watermill.LoggerAdapter) (outbox.WakeSource, func(), error) {
	switch mode {
	case wakeListen:
		l, err := postgres.NewListener(t.e.dsn, t.opts, postgres.ListenerConfig{}, logger)
		return l, func() {}, err
	case wakeAMQP:
		sub, err := amqp.NewSubscriber(wakeupConfig(amqpURL), watermill.NopLogger{})
		if err != nil {
			return nil, nil, err
		}
		src, err := wakeup.NewSource(sub, topic, t.opts, logger)
		if err != nil {
			_ = sub.Close()
			return nil, nil, err
		}
		return src, func() { _ = sub.Close() }, nil
	}
	return nil, func() {}, nil
}

func deleteExchange(url, name string) {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	_ = ch.ExchangeDelete(name, false, false)
}

// listeningLogger prints "LISTENING" on the child's stdout once the wake source
// listens (both sources log a message starting with "Listening for").
type listeningLogger struct {
	watermill.NopLogger
	out  *linePublisher
	once *sync.Once
}

func (l listeningLogger) Info(msg string, _ watermill.LogFields) {
	if len(msg) >= 13 && msg[:13] == "Listening for" {
		l.once.Do(func() { l.out.line("LISTENING") })
	}
}
func (l listeningLogger) Error(msg string, err error, _ watermill.LogFields) {
	fmt.Fprintf(os.Stderr, "child: %s: %v\n", msg, err)
}
func (l listeningLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// countNotifier counts the wake-ups a source delivers (the burst's listening side).
type countNotifier struct {
	opts outbox.Options
	n    atomic.Int64
}

func (c *countNotifier) NotifierOptions() outbox.Options { return c.opts }
func (c *countNotifier) Notify(outbox.Commit)            { c.n.Add(1) }

// burstCommits commits n one-message transactions from writers goroutines as fast as
// they go and returns the elapsed time.
func burstCommits(ctx context.Context, t *outboxTable, ob *publisher.Outbox, n, writers int) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	start := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := commitOne(ctx, t, ob); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	return elapsed, <-errc
}

func commitOne(ctx context.Context, t *outboxTable, ob *publisher.Outbox) error {
	tx, err := ob.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Publish(destination, newMessage()); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit(ctx)
}

// burstRun commits the burst into a fresh table, with contender mode's notifier linked
// and its source listening in this process (mode "" : without notifications).
func burstRun(ctx context.Context, e *engine, cfg config, mode string, n int) (d time.Duration, wakeups int64, err error) {
	t, err := e.newOutboxTable(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer t.drop()
	topic := t.opts.TablePrefix + "wakeup"
	pc := publisher.Config{}
	counter := &countNotifier{opts: t.opts}
	if mode != wakePolling {
		src, stopSrc, err := wakeSource(mode, t, cfg.amqpURL, topic, nil)
		if err != nil {
			return 0, 0, err
		}
		defer stopSrc()
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- src.Listen(lctx, counter) }()
		defer func() { cancel(); <-done }()
		time.Sleep(200 * time.Millisecond) // listening
		notifier, stop, err := writerNotifier(mode, t, cfg.amqpURL, topic)
		if err != nil {
			return 0, 0, err
		}
		defer stop()
		pc.Notifiers = []outbox.Notifier{notifier}
	}
	ob, err := publisher.New(t.store, pc, nil)
	if err != nil {
		return 0, 0, err
	}
	d, err = burstCommits(ctx, t, ob, n, burstWriters)
	time.Sleep(50 * time.Millisecond) // the last wake-ups arrive
	return d, counter.n.Load(), err
}

const burstWriters = 4

// Each burst variant runs cfg.burstRounds times per figure, every other round in
// reverse order, so that a load drift during the measurement weighs on every variant
// alike.

// burstFigures measures the commit time of a burst with each contender's notifications
// against the same burst without them.
func burstFigures(ctx context.Context, e *engine, cfg config, sec *section) error {
	modes := wakeContenders(e, cfg)
	if len(modes) == 0 {
		return nil
	}
	n := cfg.burstCommits
	order := append([]string{wakePolling}, modes...)
	took := map[string]time.Duration{}
	wakeups := map[string]int64{}
	for round := range cfg.burstRounds {
		for i := range order {
			m := order[i]
			if round%2 == 1 {
				m = order[len(order)-1-i]
			}
			d, w, err := burstRun(ctx, e, cfg, m, n)
			if err != nil {
				return fmt.Errorf("burst (%q): %w", m, err)
			}
			took[m] += d
			wakeups[m] += w
		}
	}
	cost := map[string]time.Duration{}
	for _, m := range modes {
		c, err := sendCost(ctx, e, cfg, m)
		if err != nil {
			return fmt.Errorf("send cost of %s: %w", m, err)
		}
		cost[m] = c
	}
	base := took[wakePolling]
	total := float64(n * cfg.burstRounds)
	sec.add("burst_none_commits_s", fmt.Sprintf("burst: %d commits by %d writers, no notifications", n, burstWriters), "commits/s", total/base.Seconds())
	for _, m := range modes {
		sec.add("burst_"+m+"_commits_s", fmt.Sprintf("burst with %s notifications", m), "commits/s", total/took[m].Seconds())
		sec.add("burst_"+m+"_ratio", fmt.Sprintf("burst commit time with %s / without", m), "ratio", took[m].Seconds()/base.Seconds())
		perBurst := float64(wakeups[m]) / float64(cfg.burstRounds)
		sec.add("burst_"+m+"_wakeups", fmt.Sprintf("burst: wake-ups received per burst with %s (coalesced)", m), "count", perBurst)
		sec.add(m+"_send_ms", fmt.Sprintf("one %s wake-up sent alone, p50", m), "ms", ms(cost[m]))
		// The writers' side cost: the time spent sending wake-ups, against the burst's.
		share := perBurst * cost[m].Seconds() / (took[m].Seconds() / float64(cfg.burstRounds))
		sec.add("burst_"+m+"_send_share", fmt.Sprintf("burst: time sending %s wake-ups / burst time", m), "ratio", share)
	}
	return nil
}

// sendCost returns the median time of one wake-up send of contender mode, sent the way
// its notifier sends it (PostgreSQL: the notification statement on the pool; RabbitMQ:
// one Publish), 200 in a row.
func sendCost(ctx context.Context, e *engine, cfg config, mode string) (time.Duration, error) {
	topic := newPrefix() + "wakeup_cost"
	var send func() error
	switch mode {
	case wakeListen:
		send = func() error {
			_, err := e.db.ExecContext(ctx, "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)", topic, "u,1,2")
			return err
		}
	case wakeAMQP:
		pub, err := amqp.NewPublisher(wakeupConfig(cfg.amqpURL), watermill.NopLogger{})
		if err != nil {
			return 0, err
		}
		defer func() { _ = pub.Close(); deleteExchange(cfg.amqpURL, topic) }()
		send = func() error { return pub.Publish(topic, message.NewMessage(watermill.NewULID(), []byte("u,1,2"))) }
	}
	var d []float64
	for i := -1; i < 200; i++ {
		t0 := time.Now()
		if err := send(); err != nil {
			return 0, err
		}
		if i >= 0 {
			d = append(d, float64(time.Since(t0)))
		}
	}
	slices.Sort(d)
	return time.Duration(percentile(d, 0.5)), nil
}
