package main

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/relayer-go/watermill-outbox/internal/dsn"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// broker is the message broker the forwarder publishes to and the consumer reads from.
type broker struct {
	name string // printed in the header
	pub  message.Publisher
	sub  message.Subscriber
	// partition returns where a received message was stored ("" when the broker has no
	// such notion).
	partition func(*message.Message) string
	close     func()
}

const kafkaPartitions = 4

// kafkaVersion is a protocol version that both kfake and sarama speak.
var kafkaVersion = sarama.V2_8_0_0

func openBroker(s settings, topic string, logger watermill.LoggerAdapter) (*broker, error) {
	if s.broker == "amqp" {
		return openAMQP(s, topic, logger)
	}
	return openKafka(s, topic, logger)
}

// openKafka connects to s.kafka, or starts an in-process broker (kfake speaks the Kafka
// protocol: the same watermill-kafka publisher and subscriber talk to it as to a cluster).
func openKafka(s settings, topic string, logger watermill.LoggerAdapter) (*broker, error) {
	b := &broker{close: func() {}}
	addrs := []string{s.kafka}
	b.name = "Kafka at " + s.kafka
	if s.kafka == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, topic))
		if err != nil {
			return nil, fmt.Errorf("start the in-process Kafka broker: %w", err)
		}
		addrs = cluster.ListenAddrs()
		b.name = fmt.Sprintf("in-process Kafka (kfake) at %s, topic %q with %d partitions", addrs[0], topic, kafkaPartitions)
		b.close = cluster.Close
	}

	pubCfg := kafka.DefaultSaramaSyncPublisherConfig()
	pubCfg.Version = kafkaVersion
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: addrs,
		// The Kafka message key is the outbox ordering key: one customer's messages go to
		// one partition, so the order the outbox keeps is kept by Kafka too.
		Marshaler: kafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
			return msg.Metadata.Get(publisher.MetadataOrderingKey), nil
		}),
		OverwriteSaramaConfig: pubCfg,
	}, logger)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("kafka publisher (%s): %w", addrs[0], err)
	}

	subCfg := kafka.DefaultSaramaSubscriberConfig()
	subCfg.Version = kafkaVersion
	// Read from the start: the subscriber may join after the forwarder sent the first
	// messages (it has no consumer group offsets to resume from).
	subCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               addrs,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: subCfg,
		ReconnectRetrySleep:   100 * time.Millisecond,
		// Used by SubscribeInitialize on a real cluster, where the topic may not exist.
		InitializeTopicDetails: &sarama.TopicDetail{NumPartitions: kafkaPartitions, ReplicationFactor: 1},
	}, logger)
	if err != nil {
		_ = pub.Close()
		b.close()
		return nil, fmt.Errorf("kafka subscriber (%s): %w", addrs[0], err)
	}
	if s.kafka != "" {
		if err := sub.SubscribeInitialize(topic); err != nil {
			_ = pub.Close()
			_ = sub.Close()
			return nil, fmt.Errorf("create topic %q on %s: %w", topic, s.kafka, err)
		}
	}
	stop := b.close
	b.pub, b.sub = pub, sub
	b.partition = func(msg *message.Message) string {
		if p, ok := kafka.MessagePartitionFromCtx(msg.Context()); ok {
			return fmt.Sprintf("partition %d", p)
		}
		return ""
	}
	b.close = func() {
		_ = pub.Close()
		_ = sub.Close()
		stop()
	}
	return b, nil
}

// openAMQP uses RabbitMQ with one durable queue named after the topic. The queue is
// declared before anything is published: RabbitMQ silently drops a message sent to a
// queue that does not exist, and watermill-amqp reports success all the same.
func openAMQP(s settings, topic string, logger watermill.LoggerAdapter) (*broker, error) {
	cfg := amqp.NewDurableQueueConfig(s.amqpURL)
	cfg.Publish.ChannelPoolSize = 8 // 0 would open a channel per Publish
	cfg.Publish.ConfirmDelivery = true
	where := dsn.Redact(s.amqpURL)
	pub, err := amqp.NewPublisher(cfg, logger)
	if err != nil {
		return nil, fmt.Errorf("amqp publisher (%s): %s", where, dsn.Scrub(err.Error(), s.amqpURL))
	}
	sub, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("amqp subscriber (%s): %s", where, dsn.Scrub(err.Error(), s.amqpURL))
	}
	if err := sub.SubscribeInitialize(topic); err != nil {
		_ = pub.Close()
		_ = sub.Close()
		return nil, fmt.Errorf("declare queue %q (%s): %s", topic, where, dsn.Scrub(err.Error(), s.amqpURL))
	}
	return &broker{
		name:      fmt.Sprintf("RabbitMQ at %s, durable queue %q", where, topic),
		pub:       pub,
		sub:       sub,
		partition: func(*message.Message) string { return "" },
		close: func() {
			_ = pub.Close()
			_ = sub.Close()
		},
	}, nil
}
