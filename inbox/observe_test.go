package inbox_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxtest"
)

// Config.Observe sees each decision once, with the consumer and whether the message was
// a duplicate, under both wirings (inboxtest.EachDialect runs each).
func TestObserveSeesDuplicates(t *testing.T) {
	inboxtest.EachDialect(t, func(t *testing.T, e *inboxtest.Env) {
		var (
			mu  sync.Mutex
			got []string
		)
		var calls atomic.Int64
		in := e.NewInbox(t, inbox.Config{
			Consumer: inbox.ConsumerName("billing"),
			Observe: func(msg *message.Message, consumer string, duplicate bool) {
				mu.Lock()
				defer mu.Unlock()
				s := msg.UUID + "/" + consumer
				if duplicate {
					s += "/duplicate"
				}
				got = append(got, s)
			},
		})
		h := chain(e, in, handler(e, &calls))
		for _, uuid := range []string{"m-1", "m-1", "m-2"} {
			if err := deliver(h, uuid); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"m-1/billing", "m-1/billing/duplicate", "m-2/billing"}
		if !slices.Equal(got, want) {
			t.Fatalf("Observe saw %q, want %q", got, want)
		}
	})
}
