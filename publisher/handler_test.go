package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// wiring places Retry and PoisonQueue around a handler wrapped by Outbox.Handler.
type wiring struct {
	name         string
	routerLevel  func(retry, poison message.HandlerMiddleware) []message.HandlerMiddleware
	handlerLevel func(retry, poison message.HandlerMiddleware) []message.HandlerMiddleware
	poisonFirst  bool // PoisonQueue inside Retry: the first failure is poisoned, never retried
}

var handlerWirings = []wiring{
	{name: "router Retry+PoisonQueue",
		routerLevel: func(r, p message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{p, r}
		}},
	{name: "handler Retry+PoisonQueue",
		handlerLevel: func(r, p message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{p, r}
		}},
	{name: "router PoisonQueue, handler Retry (the issue's wiring)",
		routerLevel: func(_, p message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{p}
		},
		handlerLevel: func(r, _ message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{r}
		}},
	{name: "router Retry, handler PoisonQueue",
		routerLevel: func(r, _ message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{r}
		},
		handlerLevel: func(_, p message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{p}
		},
		poisonFirst: true},
}

// TestHandlerWiringsNeverCommitFailures: Outbox.Handler and NoPublishHandler on a real
// router, with Retry and PoisonQueue at router level, at handler level and mixed. Each
// handler call writes an order row, publishes an audit message into the transaction and
// (AddHandler) returns a message; "fail-first" fails its first attempt after all that,
// "always" fails every attempt (PoisonQueue then acks it). Only the successful
// attempts' rows and messages may exist; every "always" message reaches the poison topic.
func TestHandlerWiringsNeverCommitFailures(t *testing.T) {
	for _, w := range handlerWirings {
		t.Run(w.name, func(t *testing.T) {
			eachDialect(t, 8, func(t *testing.T, e *env) { runHandlerWiring(t, e, w) })
		})
	}
}

func runHandlerWiring(t *testing.T, e *env, w wiring) {
	ob := e.newOutbox(t, publisher.Config{})
	logger := watermill.NopLogger{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	poisoned, err := pubsub.Subscribe(t.Context(), "poison")
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	retry := middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware
	poison, err := middleware.PoisonQueue(pubsub, "poison")
	if err != nil {
		t.Fatal(err)
	}
	if w.routerLevel != nil {
		router.AddMiddleware(w.routerLevel(retry, poison)...)
	}
	var attempts sync.Map // uuid -> *atomic.Int64
	work := func(msg *message.Message) (int64, error) {
		v, _ := attempts.LoadOrStore(msg.UUID, new(atomic.Int64))
		attempt := v.(*atomic.Int64).Add(1)
		ctx := msg.Context()
		sqlTx, ok := publisher.SQLTxFromContext(ctx)
		if !ok {
			return attempt, errors.New("no *sql.Tx in the message context")
		}
		var id int
		fmt.Sscan(string(msg.Payload), &id)
		if err := e.insertOrder(ctx, sqlTx, id, fmt.Sprintf("%s attempt %d", msg.UUID, attempt)); err != nil {
			return attempt, err
		}
		pub, _ := publisher.PublisherFromContext(ctx)
		if err := pub.Publish("audit", message.NewMessage(fmt.Sprintf("%s-audit-%d", msg.UUID, attempt), nil)); err != nil {
			return attempt, err
		}
		switch {
		case strings.HasSuffix(string(msg.Payload), "always"),
			strings.HasSuffix(string(msg.Payload), "fail-first") && attempt == 1:
			return attempt, fmt.Errorf("attempt %d fails after writing and publishing", attempt)
		}
		return attempt, nil
	}
	h1 := router.AddHandler("producing", "in", pubsub, "out", &probe{}, ob.Handler(func(msg *message.Message) ([]*message.Message, error) {
		attempt, err := work(msg)
		return []*message.Message{message.NewMessage(fmt.Sprintf("%s-out-%d", msg.UUID, attempt), nil)}, err
	}))
	h2 := router.AddConsumerHandler("consuming", "in2", pubsub, ob.NoPublishHandler(func(msg *message.Message) error {
		_, err := work(msg)
		return err
	}))
	if w.handlerLevel != nil {
		h1.AddMiddleware(w.handlerLevel(retry, poison)...)
		h2.AddMiddleware(w.handlerLevel(retry, poison)...)
	}
	chaos.RunRouter(t, router)

	inputs := []struct{ topic, uuid, payload string }{
		{"in", "p-ok", "1 ok"}, {"in", "p-fail", "2 fail-first"}, {"in", "p-always", "3 always"},
		{"in2", "c-ok", "4 ok"}, {"in2", "c-fail", "5 fail-first"}, {"in2", "c-always", "6 always"},
	}
	for _, in := range inputs {
		if err := pubsub.Publish(in.topic, message.NewMessage(in.uuid, []byte(in.payload))); err != nil {
			t.Fatal(err)
		}
	}
	wantPoisoned, wantOrders, wantAttempts := "c-always p-always", 4, int64(3)
	want := "audit:c-fail-audit-2 audit:c-ok-audit-1 audit:p-fail-audit-2 audit:p-ok-audit-1 out:p-fail-out-2 out:p-ok-out-1"
	if w.poisonFirst {
		wantPoisoned, wantOrders, wantAttempts = "c-always c-fail p-always p-fail", 2, 1
		want = "audit:c-ok-audit-1 audit:p-ok-audit-1 out:p-ok-out-1"
	}
	var poisonedUUIDs []string
	for len(poisonedUUIDs) < len(strings.Fields(wantPoisoned)) {
		select {
		case m := <-poisoned:
			poisonedUUIDs = append(poisonedUUIDs, m.UUID)
			m.Ack()
		case <-time.After(20 * time.Second):
			t.Fatalf("poison queue got %v; want %s", poisonedUUIDs, wantPoisoned)
		}
	}
	sort.Strings(poisonedUUIDs)
	if strings.Join(poisonedUUIDs, " ") != wantPoisoned {
		t.Fatalf("poison queue got %v; want %s", poisonedUUIDs, wantPoisoned)
	}
	chaos.WaitFor(t, 20*time.Second, "the successful calls committed", func() bool { return e.count(t, e.orders) >= wantOrders })
	time.Sleep(100 * time.Millisecond) // a late wrong commit would show now

	var got []string
	for _, r := range e.readAll(t) {
		got = append(got, r.Destination+":"+r.MessageUUID)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != want {
		t.Fatalf("outbox rows\n got %v\nwant %s", got, want)
	}
	if n := e.count(t, e.orders); n != wantOrders {
		t.Fatalf("%d order rows; want %d (a failed call's row was committed)", n, wantOrders)
	}
	for _, u := range []string{"p-always", "c-always"} {
		v, _ := attempts.Load(u)
		if a := v.(*atomic.Int64).Load(); a != wantAttempts {
			t.Errorf("%s ran %d times; want %d", u, a, wantAttempts)
		}
	}
}

// TestHandlerUnderMiddlewareRefused: Handler inside a router that also has Middleware
// would open a second transaction; it is refused with an error naming the handler.
func TestHandlerUnderMiddlewareRefused(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ob := e.newOutbox(t, publisher.Config{})
		ran := false
		h := ob.Middleware()(ob.Handler(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil }))
		msg := message.NewMessage("m1", nil)
		msg.SetContext(context.WithValue(context.Background(), struct{}{}, 1))
		_, err := h(msg)
		if err == nil || !strings.Contains(err.Error(), "already runs in an outbox transaction") || ran {
			t.Fatalf("Handler under Middleware: err %v, handler ran %v; want a refusal", err, ran)
		}
		if n := e.count(t, e.outbox); n != 0 {
			t.Fatalf("%d outbox rows", n)
		}
	})
}

// TestHandleInTx: the cqrs OnHandle helper commits fn's writes and messages on nil and
// rolls both back on an error or a panic, with the transaction in fn's ctx.
func TestHandleInTx(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ob := e.newOutbox(t, publisher.Config{})
		run := func(id int, fail error, panicking bool) error {
			return ob.HandleInTx(message.NewMessage(fmt.Sprint(id), nil), func(ctx context.Context) error {
				sqlTx, ok := publisher.SQLTxFromContext(ctx)
				if !ok {
					return errors.New("no transaction in ctx")
				}
				if err := e.insertOrder(ctx, sqlTx, id, "x"); err != nil {
					return err
				}
				msg := message.NewMessage(fmt.Sprintf("event-%d", id), nil)
				msg.SetContext(ctx)
				if err := ob.ContextPublisher().Publish("events", msg); err != nil {
					return err
				}
				if panicking {
					panic("handler panics")
				}
				return fail
			})
		}
		if err := run(1, nil, false); err != nil {
			t.Fatal(err)
		}
		failure := errors.New("command failed")
		if err := run(2, failure, false); !errors.Is(err, failure) {
			t.Fatalf("failing fn: %v", err)
		}
		var pe *publisher.PanicError
		if err := run(3, nil, true); !errors.As(err, &pe) {
			t.Fatalf("panicking fn: %v; want *PanicError", err)
		}
		if o, r := e.count(t, e.orders), e.count(t, e.outbox); o != 1 || r != 1 {
			t.Fatalf("%d orders, %d outbox rows; want 1 and 1", o, r)
		}
	})
}
