package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// A cqrs event the event handler reacts to, and the one it publishes.
type orderPaid struct {
	ID   int    `json:"id"`
	Mode string `json:"mode"`
}

type shipmentRequested struct {
	ID int `json:"id"`
}

// placeOrderCmd is a command whose handler fails per Mode: "" never, "fail-first" on
// its first attempt, "always" on every attempt, each time after writing and publishing.
type placeOrderCmd struct {
	ID   int    `json:"id"`
	Mode string `json:"mode"`
}

// cqrsWiring places Retry and PoisonQueue (or AckCommandHandlingErrors) around the
// cqrs processors' handlers, whose OnHandle runs each call in Outbox.HandleInTx.
type cqrsWiring struct {
	name                 string
	routerMW, handlerMW  func(retry, poison message.HandlerMiddleware) []message.HandlerMiddleware
	ackCommandErrors     bool
	wantOrders, wantRows []int // ids of committed order rows; ids of committed events
	wantPoisoned         []string
}

func both(r, p message.HandlerMiddleware) []message.HandlerMiddleware {
	return []message.HandlerMiddleware{p, r}
}

var cqrsWirings = []cqrsWiring{
	{name: "router Retry+PoisonQueue", routerMW: both,
		wantOrders: []int{1, 2, 101, 102}, wantRows: []int{1, 2, 101, 102}, wantPoisoned: []string{"command 3", "event 103"}},
	{name: "handler Retry+PoisonQueue", handlerMW: both,
		wantOrders: []int{1, 2, 101, 102}, wantRows: []int{1, 2, 101, 102}, wantPoisoned: []string{"command 3", "event 103"}},
	{name: "router PoisonQueue, handler Retry",
		routerMW: func(_, p message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{p}
		},
		handlerMW: func(r, _ message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{r}
		},
		wantOrders: []int{1, 2, 101, 102}, wantRows: []int{1, 2, 101, 102}, wantPoisoned: []string{"command 3", "event 103"}},
	// AckCommandHandlingErrors acks a failed command: it is gone, and nothing of it
	// was committed (fail-first is not retried either). Events still Retry.
	{name: "AckCommandHandlingErrors, router Retry", ackCommandErrors: true,
		routerMW: func(r, _ message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{r}
		},
		wantOrders: []int{1, 101, 102}, wantRows: []int{1, 101, 102}},
}

// TestCQRSSafeWiring: Watermill's components/cqrs with the recommended wiring (the
// processors' OnHandle runs each command and event handler in Outbox.HandleInTx; the
// handlers publish through an EventBus over ContextPublisher) never commits a failed
// handler's writes or events, with Retry and PoisonQueue at router level, at handler
// level, mixed, and with AckCommandHandlingErrors, on MariaDB and PostgreSQL.
func TestCQRSSafeWiring(t *testing.T) {
	for _, w := range cqrsWirings {
		t.Run(w.name, func(t *testing.T) {
			eachDialect(t, func(t *testing.T, e *env) { runCQRSWiring(t, e, w) })
		})
	}
}

func runCQRSWiring(t *testing.T, e *env, w cqrsWiring) {
	ob := newOutbox(t, e.store)
	logger := watermill.NopLogger{}
	marshaler := cqrs.JSONMarshaler{}
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, logger) // commands, incoming events, poison
	poisoned, err := pubsub.Subscribe(t.Context(), "poison")
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	retry := middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware
	poison, err := middleware.PoisonQueue(pubsub, "poison")
	if err != nil {
		t.Fatal(err)
	}
	if w.routerMW != nil {
		router.AddMiddleware(w.routerMW(retry, poison)...)
	}
	topic := func(name string) string { return "cqrs." + name }
	outEvents, err := cqrs.NewEventBusWithConfig(ob.ContextPublisher(), cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return topic(p.EventName), nil },
		Marshaler:            marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	var attempts sync.Map // "command 3" -> *atomic.Int64
	fail := func(what string, id int, mode string) error {
		v, _ := attempts.LoadOrStore(fmt.Sprintf("%s %d", what, id), new(atomic.Int64))
		attempt := v.(*atomic.Int64).Add(1)
		if mode == "always" || mode == "fail-first" && attempt == 1 {
			return fmt.Errorf("%s %d attempt %d fails after writing and publishing", what, id, attempt)
		}
		return nil
	}
	// work is both handlers' body: a business row and an event in ctx's transaction.
	work := func(ctx context.Context, id int, event any) error {
		sqlTx, ok := publisher.SQLTxFromContext(ctx)
		if !ok {
			return errors.New("no outbox transaction in the handler's ctx")
		}
		if err := e.insertOrder(ctx, sqlTx, id, "cqrs"); err != nil {
			return err
		}
		return outEvents.Publish(ctx, event)
	}

	commands, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return topic(p.CommandName), nil
		},
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) { return pubsub, nil },
		OnHandle: func(p cqrs.CommandProcessorOnHandleParams) error {
			return ob.HandleInTx(p.Message, func(ctx context.Context) error { return p.Handler.Handle(ctx, p.Command) })
		},
		Marshaler:                marshaler,
		AckCommandHandlingErrors: w.ackCommandErrors,
	})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := commands.AddHandler(cqrs.NewCommandHandler("place-order", func(ctx context.Context, c *placeOrderCmd) error {
		if err := work(ctx, c.ID, &orderPaid{ID: c.ID}); err != nil {
			return err
		}
		return fail("command", c.ID, c.Mode)
	}))
	if err != nil {
		t.Fatal(err)
	}
	events, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return topic(p.EventName), nil
		},
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) { return pubsub, nil },
		OnHandle: func(p cqrs.EventProcessorOnHandleParams) error {
			return ob.HandleInTx(p.Message, func(ctx context.Context) error { return p.Handler.Handle(ctx, p.Event) })
		},
		Marshaler: marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	eh, err := events.AddHandler(cqrs.NewEventHandler("request-shipment", func(ctx context.Context, ev *orderPaid) error {
		if err := work(ctx, ev.ID, &shipmentRequested{ID: ev.ID}); err != nil {
			return err
		}
		return fail("event", ev.ID, ev.Mode)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if w.handlerMW != nil {
		ch.AddMiddleware(w.handlerMW(retry, poison)...)
		eh.AddMiddleware(w.handlerMW(retry, poison)...)
	}
	chaos.RunRouter(t, router)

	commandBus, err := cqrs.NewCommandBusWithConfig(pubsub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return topic(p.CommandName), nil },
		Marshaler:            marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The events as the forwarder would deliver them from another service's outbox.
	incoming, err := cqrs.NewEventBusWithConfig(pubsub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return topic(p.EventName), nil },
		Marshaler:            marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i, mode := range []string{"", "fail-first", "always"} {
		if err := commandBus.Send(ctx, &placeOrderCmd{ID: 1 + i, Mode: mode}); err != nil {
			t.Fatal(err)
		}
		if err := incoming.Publish(ctx, &orderPaid{ID: 101 + i, Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}

	var gotPoisoned []string
	for len(gotPoisoned) < len(w.wantPoisoned) {
		select {
		case m := <-poisoned:
			var c placeOrderCmd // both payloads have an id
			if err := marshaler.Unmarshal(m, &c); err != nil {
				t.Fatal(err)
			}
			kind := "command"
			if c.ID > 100 {
				kind = "event"
			}
			gotPoisoned = append(gotPoisoned, fmt.Sprintf("%s %d", kind, c.ID))
			m.Ack()
		case <-time.After(30 * time.Second):
			t.Fatalf("poisoned %v; want %v", gotPoisoned, w.wantPoisoned)
		}
	}
	sort.Strings(gotPoisoned)
	if fmt.Sprint(gotPoisoned) != fmt.Sprint(w.wantPoisoned) {
		t.Fatalf("poisoned %v; want %v", gotPoisoned, w.wantPoisoned)
	}
	chaos.WaitFor(t, 30*time.Second, "the successful calls committed", func() bool { return e.count(t, e.orders) >= len(w.wantOrders) })
	chaos.WaitFor(t, 30*time.Second, "every handler call settled", func() bool {
		v, ok := attempts.Load("command 3")
		return ok && v.(*atomic.Int64).Load() >= 1
	})
	time.Sleep(200 * time.Millisecond) // a late wrong commit would show now

	if got := e.ids(t, "SELECT id FROM "+e.orders+" ORDER BY id"); fmt.Sprint(got) != fmt.Sprint(w.wantOrders) {
		t.Fatalf("committed order rows %v; want %v (a failed handler's writes were committed)", got, w.wantOrders)
	}
	var committed []int
	for _, body := range e.strings(t, "SELECT body FROM "+e.outbox) {
		var ev orderPaid
		m := message.NewMessage("x", []byte(body))
		if err := marshaler.Unmarshal(m, &ev); err != nil {
			t.Fatal(err)
		}
		committed = append(committed, ev.ID)
	}
	sort.Ints(committed)
	if fmt.Sprint(committed) != fmt.Sprint(w.wantRows) {
		t.Fatalf("committed events %v; want %v (a failed handler's events were committed)", committed, w.wantRows)
	}
}
