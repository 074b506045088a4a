package wakeup_test

import (
	"database/sql"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/wakeup"
)

// The writer (an API process) publishes wake-ups through a Pub/Sub it already runs;
// the forwarder (a worker process) subscribes to them, one subscription per process.
func Example() {
	var (
		store     outbox.Store       // mysql.New, postgres.New, sqlserver.New
		db        *sql.DB            // the application's pool
		brokerPub message.Publisher  // e.g. amqp.NewPublisher(amqp.NewNonDurablePubSubConfig(...))
		brokerSub message.Subscriber // e.g. amqp.NewSubscriber(the same, with a queue per process)
		target    message.Publisher  // where the forwarder sends the outbox's messages
		logger    = watermill.NewStdLogger(false, false)
	)
	if store == nil {
		return // this example only shows the wiring
	}

	// Writer process.
	n, err := wakeup.NewNotifier(brokerPub, "outbox_wakeup", store.Options(), wakeup.Config{}, logger)
	if err != nil {
		panic(err)
	}
	defer n.Close()
	ob, err := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, logger)
	if err != nil {
		panic(err)
	}
	_ = ob // ob.Begin(ctx) ... tx.Commit(ctx) now wakes the forwarders
	_ = db

	// Forwarder process.
	src, err := wakeup.NewSource(brokerSub, "outbox_wakeup", store.Options(), logger)
	if err != nil {
		panic(err)
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": target}, forwarder.Config{Wake: src}, logger)
	if err != nil {
		panic(err)
	}
	_ = fwd // fwd.Run(ctx)
}
