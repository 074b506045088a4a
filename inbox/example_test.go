package inbox_test

import (
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// A consumer whose handler applies each message exactly once: the pool is opened
// through the dialect's connector, so that each handler transaction begins with the
// message's inbox record in the same round trip as its BEGIN.
func ExampleInbox_OutboxMiddleware() {
	db, err := postgres.OpenDB("postgres://app@db:5432/shop?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(db, outbox.Options{TablePrefix: "payments_"})
	if err != nil {
		log.Fatal(err)
	}
	out, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(store, inbox.Config{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	// Retry and other re-running middleware go before it; the handler's writes go
	// through publisher.SQLTxFromContext, its outgoing messages through
	// publisher.PublisherFromContext, and all commit with the record.
	router.AddMiddleware(in.OutboxMiddleware(out))
}
