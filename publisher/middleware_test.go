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
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/relayer-go/watermill-outbox/publisher"
)

// probe is the router's own publisher for the AddHandler handler: with the middleware
// in place it must never be called.
type probe struct{ calls atomic.Int64 }

func (p *probe) Publish(string, ...*message.Message) error { p.calls.Add(1); return nil }
func (p *probe) Close() error                              { return nil }

// TestMiddleware runs a real Watermill router fed by Watermill's in-memory pub/sub, with
// the middleware on an AddHandler handler and on an AddConsumerHandler handler. Each
// handler writes a business row and publishes; the first attempt of some messages fails
// (error or panic) after writing. Only the successful attempts' rows and messages may
// exist in the end, and the router itself must publish nothing.
func TestMiddleware(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ob := e.newOutbox(t, publisher.Config{})
		logger := watermill.NopLogger{}
		pubsub := gochannel.NewGoChannel(gochannel.Config{}, logger)
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(ob.Middleware())

		var mu sync.Mutex
		attempts := map[string]int{}
		// work is the handlers' shared body: it returns the attempt number.
		work := func(msg *message.Message) (int, error) {
			mu.Lock()
			attempts[msg.UUID]++
			attempt := attempts[msg.UUID]
			mu.Unlock()
			ctx := msg.Context()
			sqlTx, ok := publisher.SQLTxFromContext(ctx)
			if !ok {
				return attempt, errors.New("no *sql.Tx in the message context")
			}
			var id int
			fmt.Sscan(strings.Fields(string(msg.Payload))[0], &id)
			if err := e.insertOrder(ctx, sqlTx, id, fmt.Sprintf("%s attempt %d", msg.UUID, attempt)); err != nil {
				return attempt, err
			}
			pub, ok := publisher.PublisherFromContext(ctx)
			if !ok {
				return attempt, errors.New("no publisher in the message context")
			}
			if err := pub.Publish("audit", message.NewMessage(fmt.Sprintf("%s-audit-%d", msg.UUID, attempt), nil)); err != nil {
				return attempt, err
			}
			if attempt == 1 {
				switch {
				case strings.HasSuffix(string(msg.Payload), "fail-first"):
					return attempt, errors.New("first attempt fails")
				case strings.HasSuffix(string(msg.Payload), "panic-first"):
					panic("first attempt panics")
				}
			}
			return attempt, nil
		}

		routerPub := &probe{}
		router.AddHandler("producing", "in", pubsub, "out", routerPub, func(msg *message.Message) ([]*message.Message, error) {
			attempt, err := work(msg)
			out := message.NewMessage(fmt.Sprintf("%s-out-%d", msg.UUID, attempt), msg.Payload)
			out.Metadata.Set(publisher.MetadataOrderingKey, msg.UUID)
			return []*message.Message{out}, err
		})
		router.AddConsumerHandler("consuming", "in2", pubsub, func(msg *message.Message) error {
			_, err := work(msg)
			return err
		})

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		runErr := make(chan error, 1)
		go func() { runErr <- router.Run(ctx) }()
		<-router.Running()

		inputs := []struct{ topic, uuid, payload string }{
			{"in", "p-ok", "1 ok"}, {"in", "p-fail", "2 fail-first"}, {"in", "p-panic", "3 panic-first"},
			{"in2", "c-ok", "4 ok"}, {"in2", "c-fail", "5 fail-first"}, {"in2", "c-panic", "6 panic-first"},
		}
		for _, in := range inputs {
			if err := pubsub.Publish(in.topic, message.NewMessage(in.uuid, []byte(in.payload))); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for e.count(t, e.orders) < len(inputs) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d messages handled", e.count(t, e.orders), len(inputs))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := router.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-runErr; err != nil {
			t.Fatal(err)
		}

		var got []string
		for _, r := range e.readAll(t) {
			got = append(got, r.Destination+":"+r.MessageUUID)
		}
		sort.Strings(got)
		want := []string{
			"audit:c-fail-audit-2", "audit:c-ok-audit-1", "audit:c-panic-audit-2",
			"audit:p-fail-audit-2", "audit:p-ok-audit-1", "audit:p-panic-audit-2",
			"out:p-fail-out-2", "out:p-ok-out-1", "out:p-panic-out-2",
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("outbox rows\n got %v\nwant %v", got, want)
		}
		rows, err := e.db.Query("SELECT note FROM " + e.orders + " ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var notes []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			notes = append(notes, n)
		}
		wantNotes := "p-ok attempt 1,p-fail attempt 2,p-panic attempt 2,c-ok attempt 1,c-fail attempt 2,c-panic attempt 2"
		if strings.Join(notes, ",") != wantNotes {
			t.Fatalf("orders %v, want %s", notes, wantNotes)
		}
		if n := routerPub.calls.Load(); n != 0 {
			t.Fatalf("the router published %d times itself", n)
		}
	})
}

// TestMiddlewareDirect checks the middleware's own rules without a router: the original
// message context is restored, returned messages without a publish topic are refused,
// and a panic becomes a *PanicError after the rollback.
func TestMiddlewareDirect(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ob := e.newOutbox(t, publisher.Config{})
		mw := ob.Middleware()

		msg := message.NewMessage("m", []byte("1"))
		orig := msg.Context()
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("x", nil)}, nil
		})
		out, err := h(msg)
		if err == nil || !strings.Contains(err.Error(), "no publish topic") || out != nil {
			t.Fatalf("handler without publish topic returning messages: %v, %v", out, err)
		}
		if msg.Context() != orig {
			t.Fatal("message context not restored")
		}

		h = mw(func(msg *message.Message) ([]*message.Message, error) {
			tx, _ := publisher.SQLTxFromContext(msg.Context())
			if err := e.insertOrder(msg.Context(), tx, 9, "panics"); err != nil {
				return nil, err
			}
			panic(errors.New("handler bug"))
		})
		_, err = h(msg)
		var pe *publisher.PanicError
		if !errors.As(err, &pe) || pe.Stack == "" || err.Error() == "" || !strings.Contains(err.Error(), "handler bug") {
			t.Fatalf("panic: %v, want *PanicError", err)
		}
		if e.count(t, e.orders)+e.count(t, e.outbox) != 0 {
			t.Fatal("panicked handler's writes survived")
		}
	})
}
