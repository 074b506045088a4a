package inboxcrash_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxtest"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// The crash tests run the services under test in child processes (this test binary
// re-executed into TestHelperProcess) and kill them with SIGKILL: no deferred code, no
// graceful shutdown, connections cut by the kernel; RabbitMQ requeues what they had not
// acked, and their open transactions roll back.

const (
	envRole     = "OUTBOX_INBOX_CHILD_ROLE"
	envDialect  = "OUTBOX_INBOX_CHILD_DIALECT"
	envPrefix   = "OUTBOX_INBOX_CHILD_PREFIX"   // the consumer's tables
	envPrefixA  = "OUTBOX_INBOX_CHILD_PREFIX_A" // service A's outbox (two hops)
	envTopicIn  = "OUTBOX_INBOX_CHILD_TOPIC_IN"
	envTopicOut = "OUTBOX_INBOX_CHILD_TOPIC_OUT"
	envNoInbox  = "OUTBOX_INBOX_CHILD_NO_INBOX" // the control run: the consumer without the inbox
	envWiring   = "OUTBOX_INBOX_CHILD_WIRING"   // inboxtest.Wiring's String
	childReady  = "INBOX-CHILD-READY"
	childDup    = "INBOX-DUPLICATE-SKIPPED"
)

// printMetrics prints a line per skipped duplicate, which the parent counts (a killed
// child cannot report its counters).
type printMetrics struct{}

func (printMetrics) Recorded(string)           {}
func (printMetrics) Duplicate(string)          { fmt.Println(childDup) }
func (printMetrics) Pruned(int)                {}
func (printMetrics) Entries(outbox.InboxStats) {}

// child is a helper process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	dups atomic.Int64 // duplicates the child reported skipping
	mu   sync.Mutex
	out  strings.Builder
}

// startChild runs TestHelperProcess in a new process with role and env, and waits until
// it is ready.
func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v", "-test.timeout=0")
	cmd.Env = append(append(os.Environ(), envRole+"="+role), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	c := &child{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		var once sync.Once
		for sc.Scan() {
			c.mu.Lock()
			if c.out.Len() < 1<<20 {
				c.out.WriteString(sc.Text() + "\n")
			}
			c.mu.Unlock()
			if strings.Contains(sc.Text(), childDup) {
				c.dups.Add(1)
			}
			if strings.Contains(sc.Text(), childReady) {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(c.done) }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			c.mu.Lock()
			t.Logf("child %s output:\n%s", role, c.out.String())
			c.mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-c.done:
		t.Fatalf("child %s exited before it was ready:\n%s", role, c.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("child %s not ready after 30 s", role)
	}
	return c
}

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func amqpConfig(url string) amqp.Config {
	cfg := amqp.NewDurableQueueConfig(url)
	cfg.Publish.ChannelPoolSize = 16
	cfg.Publish.ConfirmDelivery = true
	return cfg
}

// declareQueues declares topics' queues (RabbitMQ drops messages published to a queue
// that does not exist) and deletes them when the test ends.
func declareQueues(t *testing.T, url string, topics ...string) {
	t.Helper()
	cfg := amqpConfig(url)
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if err := sub.SubscribeInitialize(topic); err != nil {
			t.Fatal(err)
		}
	}
	_ = sub.Close()
	testenv.Cleanup(t, "delete the test's queues", func(context.Context) error {
		conn, err := amqp091.Dial(url)
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		for _, topic := range topics {
			if _, err := ch.QueueDelete(cfg.Queue.GenerateName(topic), false, false, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestHelperProcess is not a test: the crash tests re-execute the binary into it.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("helper process of the inbox crash tests")
	}
	var d *inboxtest.Dialect
	for _, c := range inboxtest.Dialects {
		if c.Name == os.Getenv(envDialect) {
			d = c
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	w, err := inboxtest.ParseWiring(os.Getenv(envWiring))
	if err != nil {
		t.Fatal(err)
	}
	db := inboxtest.SharedDBWired(t, d, w)
	url := testenv.DSN(t, testenv.AMQP)
	switch role {
	case "consumer": // the inbox consumer: effect only
		err = runConsumer(ctx, d, w, db, url, false)
	case "serviceB": // inbox + outbox, and B's own forwarder
		err = runConsumer(ctx, d, w, db, url, true)
	case "forwarderA":
		err = runForwarder(ctx, d, db, url, os.Getenv(envPrefixA), true)
	default:
		t.Fatalf("unknown role %q", role)
	}
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// consumerEnv rebuilds, in a child, the env the parent made.
func childEnv(d *inboxtest.Dialect, w inboxtest.Wiring, db *sql.DB, prefix string) (*inboxtest.Env, error) {
	opts := outbox.Options{TablePrefix: prefix}
	s, err := d.Store(db, opts)
	if err != nil {
		return nil, err
	}
	e := &inboxtest.Env{D: d, DB: db, Opts: s.Options(), Store: s, Effects: d.Table(opts, prefix+"effects"), Wiring: w}
	e.Out, err = publisher.New(s, publisher.Config{}, nil)
	return e, err
}

// runConsumer consumes envTopicIn with the inbox; each application inserts an effect
// row and, with publish, one outgoing message (a fresh UUID) through the outbox, which
// its forwarder sends to envTopicOut. The handler sleeps a little inside and after the
// transaction, so that kills land mid-handler and between commit and ack.
func runConsumer(ctx context.Context, d *inboxtest.Dialect, w inboxtest.Wiring, db *sql.DB, url string, publish bool) error {
	e, err := childEnv(d, w, db, os.Getenv(envPrefix))
	if err != nil {
		return err
	}
	in, err := inbox.New(e.Store, inbox.Config{Metrics: printMetrics{}}, nil)
	if err != nil {
		return err
	}
	sub, err := amqp.NewSubscriber(amqpConfig(url), watermill.NopLogger{})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	jitter := func(max time.Duration) { time.Sleep(mrand.N(max)) }
	afterCommit := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			jitter(4 * time.Millisecond) // committed, not acked yet
			return out, err
		}
	}
	if os.Getenv(envNoInbox) != "" {
		router.AddMiddleware(afterCommit, e.Out.Middleware())
	} else {
		router.AddMiddleware(append([]message.HandlerMiddleware{afterCommit}, e.Middleware(in)...)...)
	}
	router.AddConsumerHandler("consumer", os.Getenv(envTopicIn), sub, func(msg *message.Message) error {
		ctx := msg.Context()
		tx, _ := publisher.SQLTxFromContext(ctx)
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (message_uuid, note) VALUES (%s, %s)", e.Effects, d.Ph(1), d.Ph(2)),
			msg.UUID, string(msg.Payload)); err != nil {
			return err
		}
		jitter(2 * time.Millisecond) // applied, not committed yet
		if !publish {
			return nil
		}
		pub, _ := publisher.PublisherFromContext(ctx)
		return pub.Publish(os.Getenv(envTopicOut), message.NewMessage(watermill.NewUUID(), []byte(msg.Payload)))
	})
	if publish {
		go func() { _ = runForwarder(ctx, d, db, url, os.Getenv(envPrefix), false) }()
	}
	go func() {
		<-router.Running()
		fmt.Println(childReady)
	}()
	return router.Run(ctx)
}

// runForwarder sends the outbox of prefix to RabbitMQ.
func runForwarder(ctx context.Context, d *inboxtest.Dialect, db *sql.DB, url, prefix string, ready bool) error {
	s, err := d.Store(db, outbox.Options{TablePrefix: prefix})
	if err != nil {
		return err
	}
	pub, err := amqp.NewPublisher(amqpConfig(url), watermill.NopLogger{})
	if err != nil {
		return err
	}
	fwd, err := forwarder.New(s, forwarder.Targets{"": pub}, forwarder.Config{ClaimTTL: 3 * time.Second, LeaseTTL: 2 * time.Second}, nil)
	if err != nil {
		return err
	}
	if ready {
		go func() { time.Sleep(100 * time.Millisecond); fmt.Println(childReady) }()
	}
	return fwd.Run(ctx)
}

// crashLoop keeps role running, killed with SIGKILL every 1 to 3 s, until done reports
// true; it returns the number of kills and of duplicates the children skipped.
func crashLoop(t *testing.T, done func() bool, deadline time.Duration, role string, env ...string) (kills, dups int) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !done() {
		if time.Now().After(end) {
			t.Fatalf("%s: not done after %s and %d kills", role, deadline, kills)
		}
		c := startChild(t, role, env...)
		life := time.Second + time.Duration(mrand.IntN(2000))*time.Millisecond
		t0 := time.Now()
		for time.Since(t0) < life && !done() {
			time.Sleep(50 * time.Millisecond)
		}
		c.kill()
		dups += int(c.dups.Load())
		if !done() {
			kills++
		}
	}
	return kills, dups
}

// crashDialects runs fn on MariaDB and PostgreSQL (SQL Server is not crash-tested)
// with Inbox.OutboxMiddleware on the dialect's connector, and, under OUTBOX_TEST_FULL,
// again with publisher's Middleware around Inbox.Middleware.
func crashDialects(t *testing.T, fn func(t *testing.T, e *inboxtest.Env)) {
	t.Helper()
	wirings := []inboxtest.Wiring{inboxtest.Fused}
	if os.Getenv("OUTBOX_TEST_FULL") != "" {
		wirings = inboxtest.Wirings
	}
	for _, w := range wirings {
		inboxtest.EachDialectWired(t, w, func(t *testing.T, e *inboxtest.Env) {
			if e.D.Name == testenv.SQLServer {
				t.Skip("crash runs on MariaDB and PostgreSQL")
			}
			fn(t, e)
		})
	}
}

func e2eSize() int {
	if os.Getenv("OUTBOX_TEST_FULL") != "" {
		return 20000
	}
	return 2000
}

// publishDirect sends n messages with known UUIDs straight to topic.
func publishDirect(t *testing.T, url, topic string, n int) []string {
	t.Helper()
	pub, err := amqp.NewPublisher(amqpConfig(url), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ids := make([]string, n)
	var batch []*message.Message
	for i := range n {
		ids[i] = watermill.NewUUID()
		batch = append(batch, message.NewMessage(ids[i], []byte(ids[i])))
		if len(batch) == 500 || i == n-1 {
			if err := pub.Publish(topic, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return ids
}

// TestE2E_SIGKILLConsumer: a RabbitMQ consumer with the inbox, killed with SIGKILL
// every few seconds mid-handler and restarted while the broker redelivers what it had
// not acked: every message's effect is applied exactly once (counted, not enforced by
// a unique key). 2,000 messages; 20,000 under OUTBOX_TEST_FULL.
func TestE2E_SIGKILLConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a crash run takes half a minute")
	}
	url := testenv.DSN(t, testenv.AMQP)
	crashDialects(t, func(t *testing.T, e *inboxtest.Env) {
		n := e2eSize()
		topic := uniqueName("inbox_kill_")
		declareQueues(t, url, topic)
		publishDirect(t, url, topic, n)
		start := time.Now()
		applied := func() bool { return e.Count(t, "SELECT COUNT(DISTINCT message_uuid) FROM "+e.Effects) >= n }
		kills, dups := crashLoop(t, applied, 10*time.Minute, "consumer",
			envDialect+"="+e.D.Name, envWiring+"="+e.Wiring.String(), envPrefix+"="+e.Opts.TablePrefix, envTopicIn+"="+topic)
		time.Sleep(500 * time.Millisecond) // let a redelivery in flight show up, were it applied twice
		e.CheckApplications(t, n)
		t.Logf("%s: %d messages, %d SIGKILLs, %s: each effect applied once (%d effect rows, %d inbox entries), %d redeliveries skipped as duplicates",
			e.D.Name, n, kills, time.Since(start).Round(time.Second), e.Count(t, "SELECT COUNT(*) FROM "+e.Effects), e.InboxRows(t), dups)
		if kills == 0 {
			t.Errorf("no kill landed before the run ended")
		}
		// The table counts the duplicates whose transaction committed: no more than the
		// consumers saw (a kill between the decision and the commit counts only there).
		st, err := e.Store.InboxStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Duplicates() > int64(dups) {
			t.Errorf("the table counts %d duplicates; the consumers saw %d", st.Duplicates(), dups)
		}
		t.Logf("%s: the table counts %d of the %d duplicates the consumers saw", e.D.Name, st.Duplicates(), dups)
	})
}

// TestE2E_SIGKILLControl is the control of TestE2E_SIGKILLConsumer: the same run with
// the consumer WITHOUT the inbox must apply some messages twice (a kill between commit
// and ack), which shows that the crash run can catch a double application. It depends
// on kills landing in that window, so it runs only when OUTBOX_TEST_INBOX_CONTROL=1.
func TestE2E_SIGKILLControl(t *testing.T) {
	if os.Getenv("OUTBOX_TEST_INBOX_CONTROL") != "1" {
		t.Skip("set OUTBOX_TEST_INBOX_CONTROL=1 to run the control (consumer without the inbox)")
	}
	url := testenv.DSN(t, testenv.AMQP)
	crashDialects(t, func(t *testing.T, e *inboxtest.Env) {
		n := e2eSize()
		topic := uniqueName("inbox_control_")
		declareQueues(t, url, topic)
		publishDirect(t, url, topic, n)
		applied := func() bool { return e.Count(t, "SELECT COUNT(DISTINCT message_uuid) FROM "+e.Effects) >= n }
		kills, _ := crashLoop(t, applied, 10*time.Minute, "consumer",
			envDialect+"="+e.D.Name, envWiring+"="+e.Wiring.String(), envPrefix+"="+e.Opts.TablePrefix, envTopicIn+"="+topic, envNoInbox+"=1")
		time.Sleep(time.Second)
		total := e.Count(t, "SELECT COUNT(*) FROM "+e.Effects)
		t.Logf("%s without the inbox: %d messages, %d SIGKILLs: %d applications (%d applied twice or more)", e.D.Name, n, kills, total, total-n)
		if total <= n {
			t.Errorf("no message applied twice without the inbox: the kills missed the commit-to-ack window")
		}
	})
}

// TestE2E_TwoHops: service A (outbox) → RabbitMQ → service B (inbox + outbox, with its
// own forwarder) → RabbitMQ → sink (inbox), with A's forwarder and B (a second process)
// killed with SIGKILL every few seconds and restarted: each message's effect is applied
// exactly once at B and at the sink, and B stored exactly one outgoing message per
// applied effect (fresh UUIDs: a second application at B would reach the sink as
// another message and be counted there).
func TestE2E_TwoHops(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a crash run takes half a minute")
	}
	url := testenv.DSN(t, testenv.AMQP)
	crashDialects(t, func(t *testing.T, b *inboxtest.Env) {
		n := e2eSize()
		a, sink := inboxtest.NewEnvWired(t, b.D, b.Wiring), inboxtest.NewEnvWired(t, b.D, b.Wiring)
		hop1, hop2 := uniqueName("inbox_hop1_"), uniqueName("inbox_hop2_")
		declareQueues(t, url, hop1, hop2)
		sinkIn := runSink(t, sink, url, hop2)
		// Service A writes for a while (about n/200 s), so that its forwarder is killed
		// while it has work.
		var written atomic.Bool
		writeErr := make(chan error, 1)
		go func() { writeErr <- writeOutbox(a, hop1, n, &written) }()

		start := time.Now()
		env := []string{envDialect + "=" + b.D.Name, envWiring + "=" + b.Wiring.String(), envPrefix + "=" + b.Opts.TablePrefix, envPrefixA + "=" + a.Opts.TablePrefix,
			envTopicIn + "=" + hop1, envTopicOut + "=" + hop2}
		sinkDone := func() bool { return sink.Count(t, "SELECT COUNT(DISTINCT note) FROM "+sink.Effects) >= n }
		aSent := func() bool { return (written.Load() && a.OutboxRows(t) == 0) || sinkDone() }
		var wg sync.WaitGroup
		var killsA, killsB, dupsB int
		wg.Go(func() { killsA, _ = crashLoop(t, aSent, 10*time.Minute, "forwarderA", env...) })
		wg.Go(func() { killsB, dupsB = crashLoop(t, sinkDone, 10*time.Minute, "serviceB", env...) })
		wg.Wait()
		if err := <-writeErr; err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // a late redelivery would show up now

		b.CheckApplications(t, n)
		if got := b.OutboxRows(t); got != 0 {
			t.Logf("B's outbox still holds %d rows (sent, not yet deleted when B was killed)", got)
		}
		sinkApplied := sink.Count(t, "SELECT COUNT(*) FROM "+sink.Effects)
		sinkDistinct := sink.Count(t, "SELECT COUNT(DISTINCT note) FROM "+sink.Effects)
		if sinkApplied != n || sinkDistinct != n {
			t.Fatalf("sink: %d applications of %d distinct original messages; want %d, each once", sinkApplied, sinkDistinct, n)
		}
		// B's outgoing UUIDs are fresh per application: the sink's entries count them.
		if got := sink.InboxRows(t); got != n {
			t.Fatalf("sink recorded %d distinct messages from B; want %d (one per applied effect)", got, n)
		}
		t.Logf("%s: %d messages, A's forwarder killed %d times, B killed %d times, %s: B applied each once (%d redeliveries skipped at B), sink applied each once (%d duplicates from B's forwarder skipped)",
			b.D.Name, n, killsA, killsB, time.Since(start).Round(time.Second), dupsB, sinkIn.Counters().Duplicates)
	})
}

// writeOutbox commits n messages to a's outbox (service A's writes), 20 per
// transaction every 100 ms, and sets written at the end.
func writeOutbox(a *inboxtest.Env, topic string, n int, written *atomic.Bool) error {
	defer written.Store(true)
	for i := 0; i < n; i += 20 {
		err := a.Out.WithTx(context.Background(), func(ctx context.Context, tx *publisher.Tx) error {
			for range min(20, n-i) {
				id := watermill.NewUUID()
				if err := tx.Publish(topic, message.NewMessage(id, []byte(id))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// runSink consumes topic with the inbox in this process until the test ends; its effect
// row's note is the original message's UUID (the payload B forwarded).
func runSink(t *testing.T, sink *inboxtest.Env, url, topic string) *inbox.Inbox {
	t.Helper()
	in := sink.NewInbox(t, inbox.Config{})
	sub, err := amqp.NewSubscriber(amqpConfig(url), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(sink.Middleware(in)...)
	router.AddConsumerHandler("sink", topic, sub, func(msg *message.Message) error {
		ctx := msg.Context()
		tx, _ := publisher.SQLTxFromContext(ctx)
		_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (message_uuid, note) VALUES (%s, %s)", sink.Effects, sink.D.Ph(1), sink.D.Ph(2)),
			msg.UUID, string(msg.Payload))
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = router.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = sub.Close() })
	<-router.Running()
	return in
}
