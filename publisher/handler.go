package publisher

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Handler wraps a router handler function in an outbox transaction, innermost: the
// recommended wiring, safe with any Watermill middleware.
//
//	router.AddMiddleware(middleware.Retry{...}.Middleware, poison)  // anything, in any order
//	router.AddHandler("place-order", "commands", sub, "orders.placed", pub, ob.Handler(placeOrder))
//
// Each call of the returned function is one transaction (Begin, on the store's
// database): the handler writes through SQLTxFromContext and may publish through
// PublisherFromContext (or ContextPublisher); the messages it returns are stored in the
// outbox under the handler's publish topic; then the transaction commits and the
// function returns no messages, so the router publishes nothing itself. A handler error
// or panic (a *PanicError) rolls everything back and is returned.
//
// Because the transaction sits inside every router- and handler-level middleware, a
// middleware can only see a call that was committed or rolled back: Retry re-runs whole
// transactions, PoisonQueue and other middleware that turn an error into an ack ack a
// call whose writes and messages were rolled back, Timeout's cancelled context rolls
// back the call it ended. Middleware that edits the produced messages (CorrelationID)
// sees none: set their metadata in the handler. A message a forwarder emitted passes
// straight to the handler, as with Middleware. Wrapping a handler that already runs in
// a transaction of this Outbox (Middleware installed around it as well) is refused
// with an error naming the handler: one transaction per call, never two.
func (o *Outbox) Handler(h message.HandlerFunc) message.HandlerFunc {
	return o.middleware(o.store.DB(), nil)(h)
}

// NoPublishHandler is Handler for router.AddConsumerHandler: the handler publishes
// through PublisherFromContext or ContextPublisher, into its transaction.
func (o *Outbox) NoPublishHandler(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	wrapped := o.Handler(func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) })
	return func(msg *message.Message) error {
		_, err := wrapped(msg)
		return err
	}
}

// HandleInTx runs fn in an outbox transaction for msg, as Handler runs a handler: fn's
// ctx is msg's context carrying the transaction; nil commits, an error or a panic (a
// *PanicError) rolls back and is returned. It is the innermost place of handlers that
// Watermill's components/cqrs runs, through the processors' OnHandle hook, so that a
// command handler's writes and the events it publishes (an EventBus over
// ContextPublisher) share its transaction:
//
//	cqrs.CommandProcessorConfig{
//		OnHandle: func(p cqrs.CommandProcessorOnHandleParams) error {
//			return ob.HandleInTx(p.Message, func(ctx context.Context) error {
//				return p.Handler.Handle(ctx, p.Command)
//			})
//		},
//		...
//	}
//
// (EventProcessorConfig and EventGroupProcessorConfig take the same OnHandle with
// p.Event.) The processors call OnHandle inside every router and handler middleware, so
// Retry and PoisonQueue see only committed or rolled-back calls, and
// CommandProcessorConfig.AckCommandHandlingErrors acks a command whose writes and
// events were rolled back (it logs the error and the command is gone, nothing of it
// committed). A message a forwarder emitted runs fn without a transaction.
func (o *Outbox) HandleInTx(msg *message.Message, fn func(ctx context.Context) error) error {
	return o.NoPublishHandler(func(msg *message.Message) error { return fn(msg.Context()) })(msg)
}

// inTxOf reports the error for a message whose context already carries a transaction
// of this Outbox: a second Middleware, or Handler under Middleware.
func (o *Outbox) inTxOf(ctx context.Context) error {
	if tx, ok := TxFromContext(ctx); ok && tx.ob == o {
		return fmt.Errorf("publisher: handler %q already runs in an outbox transaction of this Outbox (Middleware is installed around it as well as Handler, or twice); install one of them", message.HandlerNameFromCtx(ctx))
	}
	return nil
}

// recoverInto is the deferred panic handler of a handler call: unless the call
// completed, it rolls tx back and sets *err to a *PanicError.
func recoverInto(tx *Tx, completed *bool, err *error) {
	if *completed {
		return
	}
	r := recover()
	_ = tx.Rollback()
	*err = &PanicError{Value: r, Stack: string(debug.Stack())}
}
