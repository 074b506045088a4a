package forwarder_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// A forwarder in a router next to the application's handlers: rows of the "orders"
// outbox go to the broker's publisher, with the router's retry and recoverer middleware
// and a publisher in the same process that wakes the forwarder on commit. Any
// message.Publisher is a target; with watermill-kafka, key the partitions by the row's
// ordering key (kafka.NewWithPartitioningMarshaler returning
// forwarder.RowFromContext(msg.Context()).OrderingKey) so that per-key order continues
// in Kafka: _examples/kafka does exactly that. Metrics: forwarder/prometheus.
func Example_router() {
	logger := watermill.NewStdLogger(false, false)
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := mysql.New(db, outbox.Options{TablePrefix: "orders_"})
	if err != nil {
		log.Fatal(err)
	}
	broker := gochannel.NewGoChannel(gochannel.Config{}, logger) // your Kafka or RabbitMQ publisher
	fwd, err := forwarder.New(store, forwarder.Targets{"": broker}, forwarder.Config{HandlerName: "orders_outbox"}, logger)
	if err != nil {
		log.Fatal(err)
	}
	// Writers in this process wake the forwarder right after their commit.
	if _, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger); err != nil {
		log.Fatal(err)
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 15 * time.Second}, logger)
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(
		middleware.Recoverer,
		middleware.Retry{MaxRetries: 3, InitialInterval: 50 * time.Millisecond, Logger: logger}.Middleware,
	)
	if _, err := fwd.AddToRouter(router); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := router.Run(ctx); err != nil { // refuses to start on lanes it cannot own
		log.Fatal(err)
	}
}

// Configuration mistakes are reported together, each naming its field, before anything
// runs.
func ExampleNew_invalidConfig() {
	db, _ := sql.Open("pgx", "postgres://localhost/app") // no connection is made here
	store, _ := postgres.New(db, outbox.Options{TablePrefix: "orders_"})
	pub := gochannel.NewGoChannel(gochannel.Config{}, nil)

	_, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{
		InFlight:    -1,
		RetryJitter: 2,
		RetryBase:   time.Minute, // above the 30s RetryMax default
	}, nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, outbox.ErrInvalidOptions))
	// Output:
	// outbox: invalid options: forwarder.Config.InFlight: must be at least 1, got -1
	// outbox: invalid options: forwarder.Config.RetryMax: must not be below RetryBase (1m0s), got 30s
	// outbox: invalid options: forwarder.Config.RetryJitter: must be between 0 and 1, got 2
	// true
}
