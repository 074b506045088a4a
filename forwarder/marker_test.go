package forwarder

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// The forwarder's target is an in-process gochannel that keeps contexts
// (PreserveContext), and a consumer of its topic runs on the same router under the
// inbox's OutboxMiddleware, installed router-wide. The forwarded mark must stay inside
// the forwarder: every consumer call runs in a transaction of its own (its inbox entry
// recorded), and a message delivered again is skipped as a duplicate. (The mark used to
// travel with the message: the middleware passed all 5 calls through with no
// transaction and no inbox record.)
func TestForwardedMarkStaysInsideTheForwarder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		logger := watermill.NopLogger{}
		bus := gochannel.NewGoChannel(gochannel.Config{PreserveContext: true, OutputChannelBuffer: 64}, logger)
		f, err := New(tb.store, Targets{"": bus}, fastConfig(), logger)
		if err != nil {
			t.Fatal(err)
		}
		ob, err := publisher.New(tb.store, publisher.Config{}, logger)
		if err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(tb.store.(outbox.Inbox), inbox.Config{}, logger)
		if err != nil {
			t.Fatal(err)
		}
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
		if err != nil {
			t.Fatal(err)
		}
		r.AddMiddleware(in.OutboxMiddleware(ob))
		if _, err := f.AddToRouter(r); err != nil {
			t.Fatal(err)
		}
		var calls, withTx atomic.Int64
		r.AddConsumerHandler("billing", "events", bus, func(msg *message.Message) error {
			calls.Add(1)
			if _, ok := publisher.SQLTxFromContext(msg.Context()); ok {
				withTx.Add(1)
			}
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("router did not stop")
			}
		})
		<-r.Running()
		recs := make([]outbox.Record, 5)
		for i := range recs {
			recs[i] = tb.row("events", "", "e")
		}
		tb.insert(t, recs...)
		waitFor(t, 20*time.Second, "5 consumer calls", func() bool { return calls.Load() == 5 })
		again := recs[2] // the same message delivered again (a redelivery)
		again.ID = outbox.NewID()
		tb.insert(t, again)
		inboxTable := tb.d.qualify(tb.opts, tb.opts.InboxTable())
		var entries, dups int64
		waitFor(t, 20*time.Second, "the redelivery skipped as a duplicate", func() bool {
			err := tb.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(duplicates), 0) FROM "+inboxTable).Scan(&entries, &dups)
			return err == nil && dups == 1
		})
		if calls.Load() != 5 || withTx.Load() != 5 || entries != 5 {
			t.Fatalf("consumer calls %d, with a transaction %d, inbox entries %d; want 5, 5, 5", calls.Load(), withTx.Load(), entries)
		}
	})
}
