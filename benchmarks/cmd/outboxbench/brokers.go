package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/pubbench"
)

const (
	amqpChannelPool = 32
	kafkaPartitions = 8
	// kafkaRowsFactor times brokerRows go to Kafka. kfake takes about 100k messages/s
	// here: 20,000 rows lasted 0.2 s, of which the forwarder's start took a large share
	// (64 lane leases, and the first sends of each key, one round trip after another:
	// the first Publish call of a lane returned 21–50 ms after the start against the raw
	// loop's 5–10 ms), so the ratios measured start-up rather than forwarding and moved
	// by ±20 % between runs.
	kafkaRowsFactor = 5
)

// broker is one target: a fresh topic per run and its publisher.
type broker struct {
	name  string
	rows  int // forwarded per run
	setup func(run int) (pub message.Publisher, topic string, cleanup func(), err error)
}

// brokersSection: per run and broker, the forwarder drains n rows into the broker's
// Watermill publisher, and the same publisher configuration publishes n equal messages
// directly from as many goroutines as the forwarder's in-flight window (the raw
// ceiling), and the hand-written SKIP LOCKED loop drains n rows into it publishing each
// batch concurrently (the ceiling of anything that reads rows from the database first).
// The order alternates between runs.
func brokersSection(ctx context.Context, e *engine, cfg config, sec *section) error {
	var brokers []broker
	switch {
	case !slices.Contains(cfg.brokers, "rabbitmq"): // left out by -brokers
	case cfg.amqpURL == "":
		sec.note("RabbitMQ skipped: no -amqp-url.")
	default:
		b := amqpBroker(cfg.amqpURL)
		b.rows = cfg.brokerRows
		brokers = append(brokers, b)
	}
	kb, closeKafka, err := kafkaBroker()
	if err != nil {
		return err
	}
	defer closeKafka()
	kb.rows = kafkaRowsFactor * cfg.brokerRows
	for _, b := range []broker{kb, kafkaBatchBroker(kb)} {
		if slices.Contains(cfg.brokers, b.name) {
			brokers = append(brokers, b)
		}
	}

	workers := forwarder.TokenInFlightDefault
	for _, b := range brokers {
		n := b.rows
		for run := 0; run < cfg.runs; run++ {
			var raw, ours, locking, ordered, loop float64
			measureRaw := func() error {
				pub, topic, cleanup, err := b.setup(run)
				if err != nil {
					return err
				}
				defer cleanup()
				raw, err = rawPublish(pub, topic, n, workers)
				return err
			}
			// filled runs fn over a fresh topic and a table holding n rows for it.
			filled := func(keys int, fn func(pub message.Publisher, t *outboxTable) error) error {
				pub, topic, cleanup, err := b.setup(run)
				if err != nil {
					return err
				}
				defer cleanup()
				t, err := e.newOutboxTable(ctx)
				if err != nil {
					return err
				}
				defer t.drop()
				if err := fillOutbox(ctx, t, n, keys, topic); err != nil {
					return err
				}
				return fn(pub, t)
			}
			// With -cpustats, each drain's CPU use (fill excluded): this process, the server.
			cpu := map[string][2]float64{}
			drain := func(name string, fn func() error) error {
				self, db, err := cpuUse(cfg.cpuStats, n, fn)
				cpu[name] = [2]float64{self, db}
				return err
			}
			measureOurs := func(name string, fc forwarder.Config, keys int, rate *float64) error {
				return filled(keys, func(pub message.Publisher, t *outboxTable) error {
					cp := &countingPublisher{next: pub}
					return drain(name, func() (err error) {
						*rate, err = runOurs(ctx, t, fc, 1, cp, cp.Count, n, 5*time.Minute)
						return err
					})
				})
			}
			// The database-backed ceiling: the hand-written SKIP LOCKED loop, each of its 4
			// workers publishing a batch through workers/4 goroutines at once.
			measureLoop := func() error {
				return filled(0, func(pub message.Publisher, t *outboxTable) error {
					return drain("loop", func() (err error) {
						loop, err = rawLoop(ctx, e, t, pub, workers/4, n, 5*time.Minute)
						return err
					})
				})
			}
			steps := []labeledStep{
				{"raw", measureRaw},
				{"loop", measureLoop},
				{"ours-token", func() error { return measureOurs("ours-token", forwarder.Config{TokenClaims: true}, 0, &ours) }},
				{"ours-locks", func() error { return measureOurs("ours-locks", forwarder.Config{}, 0, &locking) }},
				{"ours-ordered", func() error { return measureOurs("ours-ordered", forwarder.Config{}, orderedKeys, &ordered) }},
			}
			if run%2 == 1 {
				slices.Reverse(steps)
			}
			for _, step := range steps {
				if err := step.run(ctx, b.name); err != nil {
					return fmt.Errorf("%s: %w", b.name, err)
				}
			}
			sec.add(b.name+"/raw_msgs_per_s", b.name+": raw concurrent Publish ("+fmt.Sprint(workers)+" goroutines)", "msgs/s", raw)
			sec.add(b.name+"/ours_msgs_per_s", b.name+": ours (forwarder, TokenClaims, InFlight "+fmt.Sprint(workers)+")", "msgs/s", ours)
			sec.add(b.name+"/ratio_ours_raw", b.name+": ours / raw", "ratio", ours/raw)
			sec.add(b.name+"/ours_locking_msgs_per_s", b.name+": ours (forwarder, default Config: row locks)", "msgs/s", locking)
			sec.add(b.name+"/ratio_ours_locking_raw", b.name+": ours row locks / raw", "ratio", locking/raw)
			sec.add(b.name+"/raw_loop_msgs_per_s", b.name+": raw loop (SKIP LOCKED 500 + DELETE, 4 workers, each batch published by "+fmt.Sprint(workers/4)+" goroutines)", "msgs/s", loop)
			sec.add(b.name+"/ratio_raw_loop_raw", b.name+": raw loop / raw (the database-backed ceiling)", "ratio", loop/raw)
			sec.add(b.name+"/ratio_ours_locking_raw_loop", b.name+": ours row locks / raw loop", "ratio", locking/loop)
			sec.add(b.name+"/ours_ordered_msgs_per_s", b.name+": ours ordered (default Config, 64 lanes, 1,000 keys)", "msgs/s", ordered)
			sec.add(b.name+"/ratio_ours_ordered_raw", b.name+": ours ordered / raw", "ratio", ordered/raw)
			sec.add(b.name+"/ratio_ours_ordered_raw_loop", b.name+": ours ordered / raw loop", "ratio", ordered/loop)
			if cfg.cpuStats {
				addCPUFigures(sec, b.name, cpu)
			}
		}
	}
	sec.note("RabbitMQ: watermill-amqp v2 NewDurableQueueConfig, ChannelPoolSize %d, ConfirmDelivery, queue declared first. "+
		"Kafka: kfake in process (1 broker, %d partitions), watermill-kafka v3 sync publisher (DefaultSaramaSyncPublisherConfig), "+
		"partition key = the row's ordering key (forwarder.RowFromContext), else the message UUID; "+
		"kafka_batch: the same cluster through a publisher that sends a Publish call's messages in one SendMessages (a 30-line wrapper in this harness). "+
		"Ordered rows keep their per-key order on both: one queue, one partition per key. "+
		"Ours is timed until every row is published and deleted.", amqpChannelPool, kafkaPartitions)
	return nil
}

// rawPublish publishes n messages with `workers` goroutines through pub; messages/s.
func rawPublish(pub message.Publisher, topic string, n, workers int) (float64, error) {
	msgs := newMessages(n)
	start := time.Now()
	if err := pubbench.Concurrently(pub, topic, msgs, workers); err != nil {
		return 0, fmt.Errorf("raw %w", err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func amqpConfig(url string) amqp.Config {
	cfg := amqp.NewDurableQueueConfig(url)
	cfg.Publish.ChannelPoolSize = amqpChannelPool
	cfg.Publish.ConfirmDelivery = true
	return cfg
}

func amqpBroker(url string) broker {
	cfg := amqpConfig(url)
	return broker{name: "rabbitmq", setup: func(run int) (message.Publisher, string, func(), error) {
		topic := newPrefix() + "amqp"
		// RabbitMQ drops messages sent to a queue that does not exist: declare it first.
		sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
		if err != nil {
			return nil, "", nil, err
		}
		if err := sub.SubscribeInitialize(topic); err != nil {
			sub.Close()
			return nil, "", nil, fmt.Errorf("declare queue: %w", err)
		}
		pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
		if err != nil {
			sub.Close()
			return nil, "", nil, err
		}
		cleanup := func() {
			_ = pub.Close()
			_ = sub.Close()
			deleteQueue(cfg, topic)
		}
		return pub, topic, cleanup, nil
	}}
}

func deleteQueue(cfg amqp.Config, topic string) {
	conn, err := amqp091.Dial(cfg.Connection.AmqpURI)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	_, _ = ch.QueueDelete(cfg.Queue.GenerateName(topic), false, false, false)
}

// orderedKeys is the number of ordering keys of the brokers' ordered runs.
const orderedKeys = 1000

// partitionKey is the Kafka partition key of a message: the ordering key of the outbox
// row it was forwarded from, so that each key stays in one partition (in order), else
// its UUID.
func partitionKey(_ string, msg *message.Message) (string, error) {
	if row, ok := forwarder.RowFromContext(msg.Context()); ok && row.OrderingKey != "" {
		return row.OrderingKey, nil
	}
	return msg.UUID, nil
}

// kafkaBatchPublisher is a Watermill publisher that sends the messages of one Publish
// call in one SendMessages (one produce request per partition, in order), where
// watermill-kafka's sync publisher sends them one at a time, each waiting for its ack.
type kafkaBatchPublisher struct {
	producer  sarama.SyncProducer
	marshaler kafka.Marshaler
}

func (p *kafkaBatchPublisher) Publish(topic string, msgs ...*message.Message) error {
	batch := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		km, err := p.marshaler.Marshal(topic, m)
		if err != nil {
			return err
		}
		batch[i] = km
	}
	return p.producer.SendMessages(batch)
}

func (p *kafkaBatchPublisher) Close() error { return p.producer.Close() }

// kafkaBatchBroker is kb's cluster behind a kafkaBatchPublisher.
func kafkaBatchBroker(kb broker) broker {
	return broker{name: "kafka_batch", rows: kb.rows, setup: func(run int) (message.Publisher, string, func(), error) {
		pub, topic, cleanup, err := kb.setup(run) // creates the topic
		if err != nil {
			return nil, "", nil, err
		}
		cleanup()
		_ = pub
		sc := kafka.DefaultSaramaSyncPublisherConfig()
		sc.Version = sarama.V2_8_0_0
		sc.Metadata.Retry.Backoff = 100 * time.Millisecond
		producer, err := sarama.NewSyncProducer(kafkaAddrs, sc)
		if err != nil {
			return nil, "", nil, err
		}
		bp := &kafkaBatchPublisher{producer: producer, marshaler: kafka.NewWithPartitioningMarshaler(partitionKey)}
		return bp, topic, func() { _ = bp.Close() }, nil
	}}
}

// kafkaAddrs are the in-process cluster's listeners (set by kafkaBroker).
var kafkaAddrs []string

func kafkaBroker() (broker, func(), error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(kafkaPartitions))
	if err != nil {
		return broker{}, nil, fmt.Errorf("kfake: %w", err)
	}
	addrs := c.ListenAddrs()
	kafkaAddrs = addrs
	b := broker{name: "kafka", setup: func(run int) (message.Publisher, string, func(), error) {
		topic := newPrefix() + "kafka"
		sc := kafka.DefaultSaramaSyncPublisherConfig()
		sc.Version = sarama.V2_8_0_0
		sc.Metadata.Retry.Backoff = 100 * time.Millisecond
		pub, err := kafka.NewPublisher(kafka.PublisherConfig{
			Brokers: addrs, Marshaler: kafka.NewWithPartitioningMarshaler(partitionKey), OverwriteSaramaConfig: sc,
		}, watermill.NopLogger{})
		if err != nil {
			return nil, "", nil, err
		}
		// Create the topic (auto-creation) before timing.
		if err := pub.Publish(topic, newMessage()); err != nil {
			pub.Close()
			return nil, "", nil, fmt.Errorf("kafka warm-up: %w", err)
		}
		return pub, topic, func() { _ = pub.Close() }, nil
	}}
	return b, c.Close, nil
}

// addCPUFigures adds -cpustats' figures of one run: each drain's CPU seconds per
// 100,000 rows in this process (the forwarder or the loop, the publisher's client and,
// for Kafka, the in-process broker) and in the database server.
func addCPUFigures(sec *section, broker string, cpu map[string][2]float64) {
	for _, name := range []string{"loop", "ours-token", "ours-locks", "ours-ordered"} {
		c := cpu[name]
		key := broker + "/cpu_" + strings.ReplaceAll(name, "-", "_")
		sec.add(key+"_process", broker+": CPU per 100,000 rows, "+name+": this process", "s", c[0])
		sec.add(key+"_db", broker+": CPU per 100,000 rows, "+name+": database server", "s", c[1])
	}
}
