package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestSchemaMissingNamesTheFix: over tables that were never created, the publisher's
// commit, the forwarder's Run (after its context ends: the last real error, not the
// context's) and the inbox return an error wrapping outbox.ErrSchemaMissing whose text
// says what to run, with the table prefix.
func TestSchemaMissingNamesTheFix(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, err := sql.Open(d.driver, testenv.DSN(t, d.name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := db.PingContext(ctx); err != nil {
				testenv.Unavailable(t, d.name, err)
			}
			opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: 8}
			store, err := d.store(db, opts) // no CreateSchema
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, outbox.ErrSchemaMissing) {
					t.Fatalf("%s over missing tables: %v; want outbox.ErrSchemaMissing", what, err)
				}
				for _, want := range []string{"store.CreateSchema(ctx)", "outboxctl schema apply -dialect " + d.name, `-prefix "` + opts.TablePrefix + `"`} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %q does not say %q", what, err, want)
					}
				}
				t.Logf("%s: %v", what, err)
			}

			ob := newOutbox(t, store)
			check("publisher", ob.WithTx(ctx, func(_ context.Context, tx *publisher.Tx) error {
				return tx.Publish("orders", message.NewMessage("m1", nil))
			}))

			fwd, err := forwarder.New(store, forwarder.Targets{"": gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})},
				forwarder.Config{PollInterval: 20 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond}, nil)
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithTimeout(ctx, 500*time.Millisecond)
			defer stop()
			err = fwd.Run(runCtx)
			check("forwarder Run", err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("forwarder Run: %v; want it to say its context ended too", err)
			}

			in, err := inbox.New(store.(outbox.Inbox), inbox.Config{Consumer: func(*message.Message) (string, error) { return "c", nil }}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := func(*message.Message) ([]*message.Message, error) { return nil, nil }
			_, err = in.OutboxMiddleware(ob)(h)(message.NewMessage(watermill.NewUUID(), nil))
			check("inbox", err)
			_, err = ob.Middleware()(in.Middleware()(h))(message.NewMessage(watermill.NewUUID(), nil))
			check("inbox (separate middlewares)", err)
		})
	}
}
