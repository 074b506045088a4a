package otel_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	outboxotel "github.com/relayer-go/watermill-outbox/otel"
)

// With no span in the transaction's context (no tracer provider set), a Publish with
// otel.ExtraMetadata allocates exactly what one without it does: the hook's cost is a
// few context lookups per message (BenchmarkPublishOverhead times it).
func TestPublishHookAllocatesNothingWithoutASpan(t *testing.T) {
	db, err := sql.Open("mysql", testenv.DSN(t, testenv.MySQL))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := mysql.New(db, outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, testenv.MySQL, err)
	}
	msg := message.NewMessage("m-1", []byte(`{"order":42}`))
	msg.Metadata.Set("name", "OrderPlaced")
	allocs := func(extra func(context.Context, string, *message.Message) (message.Metadata, error)) float64 {
		ob := newOutbox(t, store, extra)
		tx, err := ob.Begin(ctx) // Publish does no I/O: the tables need not exist
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		return testing.AllocsPerRun(1000, func() {
			if err := tx.Publish("orders", msg); err != nil {
				t.Fatal(err)
			}
		})
	}
	none, hook := allocs(nil), allocs(outboxotel.ExtraMetadata(outboxotel.Config{}))
	t.Logf("allocations per Publish: %.2f without the hook, %.2f with it", none, hook)
	if hook != none {
		t.Errorf("Publish with otel.ExtraMetadata and no span allocates %.2f times, without it %.2f", hook, none)
	}
}
