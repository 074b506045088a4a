package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxtest"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// full reports OUTBOX_TEST_FULL: the sizes instead of CI's.
func full() bool { return os.Getenv("OUTBOX_TEST_FULL") != "" }

// handler applies the message's effect and publishes one outgoing message, both in the
// middleware's transaction.
func handler(e *inboxtest.Env, calls *atomic.Int64) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		if calls != nil {
			calls.Add(1)
		}
		ctx := msg.Context()
		tx, _ := publisher.SQLTxFromContext(ctx)
		if err := e.ApplyEffect(ctx, tx, msg.UUID); err != nil {
			return err
		}
		pub, _ := publisher.PublisherFromContext(ctx)
		return pub.Publish("out", message.NewMessage(watermill.NewUUID(), []byte(msg.UUID)))
	}
}

// chain wraps h the way a router would under the env's wiring (inboxtest.Env.Chain).
func chain(e *inboxtest.Env, in *inbox.Inbox, h message.NoPublishHandlerFunc) message.HandlerFunc {
	return e.Chain(in, func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) })
}

func deliver(h message.HandlerFunc, uuid string) error {
	_, err := h(message.NewMessage(uuid, []byte("payload")))
	return err
}

// A redelivered message is acked without running the handler and counted; its effect
// and its outgoing message exist once.
func TestDuplicateSkipped(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		var calls atomic.Int64
		in := e.NewInbox(t, inbox.Config{})
		h := chain(e, in, handler(e, &calls))
		for range 3 {
			if err := deliver(h, "m-1"); err != nil {
				t.Fatal(err)
			}
		}
		if calls.Load() != 1 {
			t.Fatalf("handler ran %d times; want 1", calls.Load())
		}
		e.CheckApplications(t, 1)
		if n := e.OutboxRows(t); n != 1 {
			t.Fatalf("%d outgoing messages; want 1", n)
		}
		if c := in.Counters(); c.Recorded != 1 || c.Duplicates != 2 {
			t.Fatalf("counters %+v; want 1 recorded, 2 duplicates", c)
		}
		// Another consumer applies the same message once too.
		other := e.NewInbox(t, inbox.Config{Consumer: inbox.ConsumerName("shipping")})
		if err := deliver(chain(e, other, handler(e, &calls)), "m-1"); err != nil {
			t.Fatal(err)
		}
		if calls.Load() != 2 {
			t.Fatalf("second consumer: handler ran %d times in all; want 2", calls.Load())
		}
	})
}

// A message without a UUID is an error, never processed.
func TestNoUUIDIsAnError(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		var calls atomic.Int64
		err := deliver(chain(e, e.NewInbox(t, inbox.Config{}), handler(e, &calls)), "")
		if !errors.Is(err, outbox.ErrNoMessageUUID) {
			t.Fatalf("err = %v; want ErrNoMessageUUID", err)
		}
		if calls.Load() != 0 || e.InboxRows(t) != 0 {
			t.Fatalf("handler ran %d times, %d inbox rows; want none", calls.Load(), e.InboxRows(t))
		}
	})
}

// Without publisher's Middleware around it the inbox has no transaction to record in.
func TestNoTxIsAnError(t *testing.T) {
	e := inboxtest.NewEnv(t, inboxtest.Dialects[0])
	h := e.NewInbox(t, inbox.Config{}).Middleware()(func(*message.Message) ([]*message.Message, error) {
		t.Fatal("handler ran")
		return nil, nil
	})
	if _, err := h(message.NewMessage("m", nil)); !errors.Is(err, outbox.ErrNoTx) {
		t.Fatalf("err = %v; want ErrNoTx", err)
	}
}

// A failed handler rolls the record back with its writes: the redelivery runs it again.
func TestFailedHandlerIsRetried(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		var calls atomic.Int64
		apply := handler(e, &calls)
		h := chain(e, e.NewInbox(t, inbox.Config{}), func(msg *message.Message) error {
			if err := apply(msg); err != nil {
				return err
			}
			if calls.Load() == 1 {
				return errors.New("crash after the writes")
			}
			return nil
		})
		if err := deliver(h, "m"); err == nil {
			t.Fatal("first delivery: no error")
		}
		for range 2 {
			if err := deliver(h, "m"); err != nil {
				t.Fatal(err)
			}
		}
		if calls.Load() != 2 {
			t.Fatalf("handler ran %d times; want 2 (failed, then applied)", calls.Load())
		}
		e.CheckApplications(t, 1)
	})
}

// Two deliveries of one message at the same time: the second waits for the first's
// transaction, then skips (first committed) or runs the handler (first rolled back).
func TestConcurrentDeliveries(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("first fails %v", firstFails), func(t *testing.T) {
			t.Parallel()
			inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) { concurrentDeliveries(t, e, firstFails) })
		})
	}
}

func concurrentDeliveries(t *testing.T, e *inboxtest.Env, firstFails bool) {
	var calls atomic.Int64
	apply := handler(e, &calls)
	inFirst, release := make(chan struct{}), make(chan struct{})
	h := chain(e, e.NewInbox(t, inbox.Config{}), func(msg *message.Message) error {
		if calls.Load() > 0 { // the second delivery, run only after a rollback
			return apply(msg)
		}
		if err := apply(msg); err != nil {
			return err
		}
		close(inFirst)
		<-release
		if firstFails {
			return errors.New("first attempt fails")
		}
		return nil
	})
	first := make(chan error, 1)
	go func() { first <- deliver(h, "m") }()
	<-inFirst
	second := make(chan error, 1)
	go func() { second <- deliver(h, "m") }()
	select {
	case err := <-second:
		t.Fatalf("second delivery finished (%v) while the first's transaction was open", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-first; (err != nil) != firstFails {
		t.Fatalf("first delivery: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	wantCalls := int64(1)
	if firstFails {
		wantCalls = 2
	}
	if calls.Load() != wantCalls {
		t.Fatalf("handler ran %d times; want %d", calls.Load(), wantCalls)
	}
	e.CheckApplications(t, 1)
}

// Duplicate storm: every message delivered three times, concurrently and shuffled:
// each effect once, the other deliveries counted as duplicates. The size
// (10,000 messages) under OUTBOX_TEST_FULL; 1,000 otherwise.
func TestDuplicateStorm(t *testing.T) {
	n := 1000
	if full() {
		n = 10000
	}
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		in := e.NewInbox(t, inbox.Config{})
		h := chain(e, in, handler(e, nil))
		deliveries := make([]string, 0, 3*n)
		for i := range n {
			id := fmt.Sprintf("storm-%06d", i)
			deliveries = append(deliveries, id, id, id)
		}
		rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
		var next, retried atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := time.Now()
		for range 8 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(deliveries) {
						return
					}
					// A delivery that loses a deadlock (MySQL, three inserts of one key)
					// is nacked and redelivered: retry it like a broker would.
					for attempt := 0; ; attempt++ {
						err := deliver(h, deliveries[i])
						if err == nil {
							break
						}
						if !outbox.IsRetryable(err) || attempt == 10 {
							errs <- err
							return
						}
						retried.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		e.CheckApplications(t, n)
		c := in.Counters()
		t.Logf("%s: %d messages × 3 in %s: %d effects, %d recorded, %d duplicates, %d outgoing, %d deliveries retried (deadlock victims)",
			e.D.Name, n, time.Since(start).Round(time.Millisecond), n, c.Recorded, c.Duplicates, e.OutboxRows(t), retried.Load())
		if c.Recorded != uint64(n) || c.Duplicates != uint64(2*n) || e.OutboxRows(t) != n {
			t.Fatalf("counters %+v, %d outgoing; want %d recorded, %d duplicates, %d outgoing", c, e.OutboxRows(t), n, 2*n, n)
		}
		// The table counts the same duplicates (what outboxctl stats shows).
		st, err := e.Store.InboxStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Entries() != int64(n) || st.Duplicates() != int64(2*n) {
			t.Fatalf("InboxStats: %d entries, %d duplicates; want %d, %d", st.Entries(), st.Duplicates(), n, 2*n)
		}
	})
}

// Through a router the consumer defaults to the handler's name.
func TestRouterConsumerIsHandlerName(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(e.Store, inbox.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(e.Middleware(in)...)
		var calls atomic.Int64
		router.AddConsumerHandler("orders_consumer", "in", pubsub, handler(e, &calls))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = router.Run(ctx) }()
		<-router.Running()
		for range 3 {
			if err := pubsub.Publish("in", message.NewMessage("same", nil)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for in.Counters().Duplicates < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		_ = router.Close()
		st, err := e.Store.InboxStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if calls.Load() != 1 || len(st.Consumers) != 1 || st.Consumers[0].Consumer != "orders_consumer" {
			t.Fatalf("handler ran %d times, inbox %+v; want once, consumer orders_consumer", calls.Load(), st)
		}
	})
}

// panicMetrics panics when a message is recorded.
type panicMetrics struct{}

func (panicMetrics) Recorded(string)           { panic("metrics exploded") }
func (panicMetrics) Duplicate(string)          {}
func (panicMetrics) Pruned(int)                {}
func (panicMetrics) Entries(outbox.InboxStats) {}

// A panic after the record (here: the metrics) rolls the transaction back and is
// returned as a *publisher.PanicError in both wirings: nothing stays locked, and the
// redelivery applies the message.
func TestPanicAfterRecordRollsBack(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		var calls atomic.Int64
		bad := chain(e, e.NewInbox(t, inbox.Config{Metrics: panicMetrics{}}), handler(e, &calls))
		var pe *publisher.PanicError
		if err := deliver(bad, "m"); !errors.As(err, &pe) {
			t.Fatalf("err = %v; want a *publisher.PanicError", err)
		}
		good := chain(e, e.NewInbox(t, inbox.Config{}), handler(e, &calls))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msg := message.NewMessage("m", []byte("payload"))
		msg.SetContext(ctx)
		if _, err := good(msg); err != nil {
			t.Fatalf("redelivery: %v (the first transaction still holds the entry?)", err)
		}
		e.CheckApplications(t, 1)
	})
}
