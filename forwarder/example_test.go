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
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/jackc/pgx/v5/stdlib"
	prom "github.com/prometheus/client_golang/prometheus"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/forwarder/prometheus"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// A forwarder in a router next to the application's handlers: rows of the "orders"
// outbox go to Kafka, with the router's retry and recoverer middleware, Prometheus
// metrics and a publisher in the same process that wakes the forwarder on commit.
func Example_router() {
	logger := watermill.NewStdLogger(false, false)
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app?parseTime=true")
	if err != nil {
		log.Fatal(err)
	}
	store, err := mysql.New(db, outbox.Options{TablePrefix: "orders_"})
	if err != nil {
		log.Fatal(err)
	}
	kafkaPub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: []string{"127.0.0.1:9092"},
		Marshaler: kafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
			row, _ := forwarder.RowFromContext(msg.Context())
			return row.OrderingKey, nil // per-key order continues in Kafka partitions
		}),
	}, logger)
	if err != nil {
		log.Fatal(err)
	}
	metrics, err := prometheus.New(prom.DefaultRegisterer, prometheus.Config{})
	if err != nil {
		log.Fatal(err)
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": kafkaPub}, forwarder.Config{
		HandlerName: "orders_outbox",
		Metrics:     metrics.Forwarder("orders_outbox"),
	}, logger)
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
