// Command kafka forwards outbox rows to a real Kafka cluster (docker-compose.yml's
// `kafka` service: `docker compose up -d --wait kafka`, broker 127.0.0.1:9092).
//
// The Kafka message key is the outbox ordering key (watermill-kafka's partitioning
// marshaler, reading the row from the message context), so all messages of one key land
// in one partition, where Kafka keeps the order the outbox sent them in. The consumer
// uses a consumer group; a new group starts from the oldest offset.
//
//	go run ./_examples/kafka -brokers 127.0.0.1:9092 -dsn 'root@tcp(127.0.0.1:3306)/test'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/publisher"
)

const topic = "outbox_example.orders"

func main() {
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL/MariaDB DSN (env OUTBOX_DSN)")
	brokers := flag.String("brokers", envOr("OUTBOX_KAFKA", "127.0.0.1:9092"), "Kafka bootstrap brokers, comma-separated (env OUTBOX_KAFKA)")
	prefix := flag.String("prefix", "kafka_", "table prefix")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, strings.Split(*brokers, ","), *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn string, brokers []string, prefix string) error {
	logger := watermill.NopLogger{}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// A forwarder runs one worker per lane it holds (64 by default): unbounded, they would
	// open a connection each after every burst, and database/sql keeps only two idle.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	store, err := mysql.New(db, outbox.Options{TablePrefix: prefix})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}

	pubCfg := kafka.DefaultSaramaSyncPublisherConfig()
	pubCfg.Version = sarama.V2_8_0_0
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: brokers,
		Marshaler: kafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
			row, _ := forwarder.RowFromContext(msg.Context())
			return row.OrderingKey, nil // "" for unordered rows: any partition
		}),
		OverwriteSaramaConfig: pubCfg,
	}, logger)
	if err != nil {
		return err
	}
	defer pub.Close()

	subCfg := kafka.DefaultSaramaSubscriberConfig()
	subCfg.Version = sarama.V2_8_0_0
	subCfg.Consumer.Offsets.Initial = sarama.OffsetOldest // a new group reads from the start
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:                brokers,
		Unmarshaler:            kafka.DefaultMarshaler{},
		ConsumerGroup:          "outbox_example",
		OverwriteSaramaConfig:  subCfg,
		InitializeTopicDetails: &sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: 1},
	}, logger)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil { // create the topic when missing
		return err
	}

	fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{}, logger)
	if err != nil {
		return err
	}
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	if err != nil {
		return err
	}
	fwdCtx, stopFwd := context.WithCancel(ctx)
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(fwdCtx) }()
	defer func() { stopFwd(); <-fwdDone }()

	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	customers := []string{"alice", "bob", "carol"}
	const n = 12
	for i := range n {
		err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{"n":`+strconv.Itoa(i)+`}`))
			msg.Metadata.Set(publisher.MetadataOrderingKey, customers[i%len(customers)])
			msg.Metadata.Set("run", run)
			msg.Metadata.Set("n", strconv.Itoa(i))
			return tx.Publish(topic, msg)
		})
		if err != nil {
			return err
		}
	}
	fmt.Printf("committed %d messages for %d customers\n", n, len(customers))

	last := map[string]int{}
	partitionOf := map[string]int32{}
	for got := 0; got < n; {
		select {
		case m := <-msgs:
			m.Ack()
			if m.Metadata.Get("run") != run {
				continue // an earlier run's message (the group had not read it)
			}
			key := m.Metadata.Get(publisher.MetadataOrderingKey)
			i, _ := strconv.Atoi(m.Metadata.Get("n"))
			p, _ := kafka.MessagePartitionFromCtx(m.Context())
			if prev, ok := last[key]; ok && i <= prev {
				return fmt.Errorf("%s: message %d after %d", key, i, prev)
			}
			if q, ok := partitionOf[key]; ok && q != p {
				return fmt.Errorf("%s: partitions %d and %d", key, q, p)
			}
			last[key], partitionOf[key] = i, p
			fmt.Printf("received %-5s n=%-2d partition %d\n", key, i, p)
			got++
		case <-ctx.Done():
			return fmt.Errorf("timed out")
		}
	}
	fmt.Println("OK: kafka: every message arrived, one partition per customer, in order")
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
