package publisher_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/publisher"
)

type ctxKey struct{}

// ExtraMetadata adds entries the message lacks, from the transaction's context, keeps
// the message's own values, leaves the caller's message unchanged, and an error
// refuses the Publish call.
func TestExtraMetadata(t *testing.T) {
	eachDialect(t, 4, func(t *testing.T, e *env) {
		ctx := context.WithValue(context.Background(), ctxKey{}, "from-tx-ctx")
		refuse := errors.New("refused")
		ob := e.newOutbox(t, publisher.Config{
			ExtraMetadata: func(ctx context.Context, topic string, msg *message.Message) (message.Metadata, error) {
				switch msg.UUID {
				case "refuse":
					return nil, refuse
				case "none":
					return nil, nil
				}
				v, _ := ctx.Value(ctxKey{}).(string)
				return message.Metadata{"traceparent": v, "topic": topic}, nil
			},
		})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		plain := newMsg("plain", "p", "a", "1")
		own := newMsg("own", "o", "traceparent", "mine")
		none := newMsg("none", "n", "a", "2")
		for _, m := range []*message.Message{plain, own, none} {
			if err := tx.Publish("topic-x", m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Publish("topic-x", newMsg("refuse", "r")); !errors.Is(err, refuse) {
			t.Fatalf("Publish with a failing ExtraMetadata: %v, want the hook's error", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if len(plain.Metadata) != 1 || len(own.Metadata) != 1 {
			t.Errorf("the caller's messages were changed: %v %v", plain.Metadata, own.Metadata)
		}
		want := map[string]message.Metadata{
			"plain": {"a": "1", "traceparent": "from-tx-ctx", "topic": "topic-x"},
			"own":   {"traceparent": "mine", "topic": "topic-x"},
			"none":  {"a": "2"},
		}
		rows := byUUID(e.readAll(t))
		if len(rows) != len(want) {
			t.Fatalf("%d rows, want %d", len(rows), len(want))
		}
		for uuid, md := range want {
			got, err := headercodec.DecodeMetadata(rows[uuid].Headers)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, md) {
				t.Errorf("%s: stored metadata %v, want %v", uuid, got, md)
			}
		}
	})
}
