package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Commands and events of Watermill's components/cqrs.
type placeOrder struct {
	ID   int  `json:"id"`
	Fail bool `json:"fail"`
}

type orderPlaced struct {
	ID int `json:"id"`
}

// cqrsEnv is a command processor on a router with the outbox middleware, whose handler
// writes an order and publishes orderPlaced through an EventBus built on the outbox's
// ContextPublisher.
type cqrsEnv struct {
	commands *cqrs.CommandBus
	events   *cqrs.EventBus
	calls    sync.Map // command id -> *atomic.Int64
}

func newCQRS(t *testing.T, e *env, ob *publisher.Outbox) *cqrsEnv {
	t.Helper()
	logger := watermill.NopLogger{}
	marshaler := cqrs.JSONMarshaler{}
	commandsPubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(ob.Middleware())
	c := &cqrsEnv{}
	c.events, err = cqrs.NewEventBusWithConfig(ob.ContextPublisher(), cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return "events." + p.EventName, nil },
		Marshaler:            marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.commands, err = cqrs.NewCommandBusWithConfig(commandsPubSub, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return "commands." + p.CommandName, nil
		},
		Marshaler: marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	processor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return "commands." + p.CommandName, nil
		},
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commandsPubSub, nil
		},
		Marshaler: marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = processor.AddHandlers(cqrs.NewCommandHandler("place-order", func(ctx context.Context, cmd *placeOrder) error {
		v, _ := c.calls.LoadOrStore(cmd.ID, new(atomic.Int64))
		attempt := v.(*atomic.Int64).Add(1)
		sqlTx, ok := publisher.SQLTxFromContext(ctx)
		if !ok {
			return errors.New("no transaction in the command handler's context")
		}
		if err := e.insertOrder(ctx, sqlTx, cmd.ID, fmt.Sprintf("attempt %d", attempt)); err != nil {
			return err
		}
		if err := c.events.Publish(ctx, &orderPlaced{ID: cmd.ID}); err != nil {
			return err
		}
		if cmd.Fail && attempt == 1 {
			return errors.New("command handler fails after writing and publishing")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	chaos.RunRouter(t, router)
	return c
}

func (c *cqrsEnv) attempts(id int) int64 {
	v, ok := c.calls.Load(id)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// TestContextPublisherCQRS: Watermill's components/cqrs on a real router with the outbox
// middleware, the EventBus publishing through ContextPublisher. A command handler's
// event commits with its writes; a handler that fails after writing and publishing
// leaves neither (its redelivery then commits both, once); an EventBus used outside any
// transaction returns outbox.ErrNoTransaction and writes nothing.
func TestContextPublisherCQRS(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		ob := newOutbox(t, e.store)
		c := newCQRS(t, e, ob)
		ctx := t.Context()

		if err := c.commands.Send(ctx, &placeOrder{ID: 1}); err != nil {
			t.Fatal(err)
		}
		chaos.WaitFor(t, 30*time.Second, "order 1 and its event committed", func() bool { return e.count(t, e.outbox) == 1 })
		if n := e.count(t, e.orders); n != 1 {
			t.Fatalf("%d orders after command 1; want 1", n)
		}

		// Fails once after writing and publishing: rolled back, then redelivered.
		if err := c.commands.Send(ctx, &placeOrder{ID: 2, Fail: true}); err != nil {
			t.Fatal(err)
		}
		chaos.WaitFor(t, 30*time.Second, "order 2 committed on its second attempt", func() bool { return e.count(t, e.outbox) == 2 })
		if a := c.attempts(2); a != 2 {
			t.Fatalf("command 2 handled %d times; want 2", a)
		}
		if n := e.count(t, e.orders); n != 2 {
			t.Fatalf("%d orders; want 2 (the failed attempt's row rolled back)", n)
		}

		// Outside any transaction: a loud error, nothing written.
		err := c.events.Publish(ctx, &orderPlaced{ID: 3})
		if !errors.Is(err, outbox.ErrNoTransaction) {
			t.Fatalf("EventBus.Publish outside a transaction: %v; want outbox.ErrNoTransaction", err)
		}
		t.Logf("outside a transaction: %v", err)
		if n := e.count(t, e.outbox); n != 2 {
			t.Fatalf("%d outbox rows after a refused publish; want 2", n)
		}

		// Plain service code with its own *sql.Tx: AttachContext.
		sqlTx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		txCtx, tx := ob.AttachContext(ctx, sqlTx)
		if err := c.events.Publish(txCtx, &orderPlaced{ID: 4}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sqlTx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, e.outbox); n != 3 {
			t.Fatalf("%d outbox rows after the attached transaction; want 3", n)
		}
	})
}

func newOutbox(t *testing.T, store outbox.Store) *publisher.Outbox {
	t.Helper()
	ob, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}
