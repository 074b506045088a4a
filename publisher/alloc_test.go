package publisher_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestPublishAllocatesOneBufferPerMessage pins the cost of Publish: one allocation per
// message, the owned buffer holding the encoded metadata and the payload copy. (The
// buffer of records grows by doubling; AllocsPerRun's integer average hides it.)
func TestPublishAllocatesOneBufferPerMessage(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	e := newEnv(t, dialects[0], 64)
	ob := e.newOutbox(t, publisher.Config{})
	ctx := context.Background()
	tx, err := ob.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	msg := message.NewMessage("2a3f5b9e-0c1d-4e2f-8a9b-0c1d2e3f4a5b", make([]byte, 256))
	msg.Metadata.Set(publisher.MetadataOrderingKey, "customer-42")
	msg.Metadata.Set(publisher.MetadataMessageType, "OrderPlaced")
	msg.Metadata.Set("correlation_id", "c0ffee")
	allocs := testing.AllocsPerRun(2000, func() {
		if err := tx.Publish("orders", msg); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Fatalf("Publish of one message: %v allocations, want 1", allocs)
	}
	batch := make([]*message.Message, 64)
	for i := range batch {
		batch[i] = msg
	}
	allocs = testing.AllocsPerRun(100, func() {
		if err := tx.Publish("orders", batch...); err != nil {
			t.Fatal(err)
		}
	})
	// 64 owned buffers plus the call's scratch slice.
	if allocs > 65 {
		t.Fatalf("Publish of 64 messages: %v allocations, want at most 65", allocs)
	}
}
