package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// wire builds the router: router-wide Recoverer, PoisonQueue and Retry (which apply to
// the forwarder too: it never deletes a row whose message it did not publish), the
// forwarder, a command processor and an event processor whose handlers run in
// ob.HandleInTx, and the command bus.
func (a *app) wire(commands, events *gochannel.GoChannel, ackErrors bool) (*message.Router, *cqrs.CommandBus, error) {
	logger := watermill.NopLogger{}
	fwd, err := forwarder.New(a.store, forwarder.Targets{"": events}, forwarder.Config{}, logger)
	if err != nil {
		return nil, nil, err
	}
	ob, err := publisher.New(a.store, publisher.Config{Notifier: fwd}, logger)
	if err != nil {
		return nil, nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, nil, err
	}
	poison, err := middleware.PoisonQueue(events, "commands.poison")
	if err != nil {
		return nil, nil, err
	}
	// Any middleware, in any order: the outbox transaction is inside all of them.
	router.AddMiddleware(middleware.Recoverer, poison, middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware)
	if _, err := fwd.AddToRouter(router); err != nil {
		return nil, nil, err
	}

	marshaler := cqrs.JSONMarshaler{}
	topic := func(name string) string { return "cqrs." + name }
	// The events of command handlers go into their transaction: EventBus over
	// ContextPublisher publishes into the transaction the ctx carries.
	eventBus, err := cqrs.NewEventBusWithConfig(ob.ContextPublisher(), cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return topic(p.EventName), nil },
		Marshaler:            marshaler,
	})
	if err != nil {
		return nil, nil, err
	}
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return topic(p.CommandName), nil
		},
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commands, nil
		},
		// THE safe wiring: each handler call is one outbox transaction, innermost.
		OnHandle: func(p cqrs.CommandProcessorOnHandleParams) error {
			return ob.HandleInTx(p.Message, func(ctx context.Context) error { return p.Handler.Handle(ctx, p.Command) })
		},
		Marshaler: marshaler,
		// Acks a failed command after its transaction rolled back: it is gone, nothing
		// of it committed. Without it, Retry and then the PoisonQueue take it.
		AckCommandHandlingErrors: ackErrors,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := commandProcessor.AddHandlers(cqrs.NewCommandHandler("place_order", a.placeOrder(eventBus))); err != nil {
		return nil, nil, err
	}
	eventProcessor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return topic(p.EventName), nil
		},
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) { return events, nil },
		OnHandle: func(p cqrs.EventProcessorOnHandleParams) error {
			return ob.HandleInTx(p.Message, func(ctx context.Context) error { return p.Handler.Handle(ctx, p.Event) })
		},
		Marshaler: marshaler,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := eventProcessor.AddHandlers(cqrs.NewEventHandler("on_order_placed", a.onOrderPlaced)); err != nil {
		return nil, nil, err
	}
	router.AddConsumerHandler("print_poison", "commands.poison", events, a.onPoisoned)

	commandBus, err := cqrs.NewCommandBusWithConfig(commands, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) { return topic(p.CommandName), nil },
		Marshaler:            marshaler,
	})
	return router, commandBus, err
}

// placeOrder is the command handler: an order row and an OrderPlaced event, in the
// transaction ctx carries. A negative amount fails after both: nothing of it remains.
func (a *app) placeOrder(eventBus *cqrs.EventBus) func(ctx context.Context, cmd *PlaceOrder) error {
	return func(ctx context.Context, cmd *PlaceOrder) error {
		a.mu.Lock()
		a.attempts[cmd.OrderID]++
		a.mu.Unlock()
		tx, _ := publisher.SQLTxFromContext(ctx)
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (id, customer, amount_cents) VALUES (%s, %s, %s)", a.orders, a.ph(1), a.ph(2), a.ph(3)),
			cmd.OrderID, cmd.Customer, cmd.AmountCents); err != nil {
			return err
		}
		if err := eventBus.Publish(ctx, &OrderPlaced{OrderID: cmd.OrderID}); err != nil {
			return err
		}
		if cmd.AmountCents < 0 {
			return fmt.Errorf("order %s: negative amount", cmd.OrderID) // rolls back the row and the event
		}
		return nil
	}
}
