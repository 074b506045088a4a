package brokers

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaPartitions is the partition count of seeded topics.
const KafkaPartitions = 8

// StartKafka runs an in-process Kafka cluster (kfake speaks the real protocol) with the
// given topics, closed at the end of the test, and returns its broker addresses.
func StartKafka(t testing.TB, topics ...string) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(KafkaPartitions)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(KafkaPartitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// saramaVersion is a protocol version kfake serves and sarama >= 1.46 speaks.
var saramaVersion = sarama.V2_8_0_0

// KeyFromMetadata returns a partition key generator that reads the ordering key from the
// given metadata key (the outbox publisher's ordering-key metadata).
func KeyFromMetadata(metadataKey string) kafka.GeneratePartitionKey {
	return func(_ string, msg *message.Message) (string, error) {
		return msg.Metadata.Get(metadataKey), nil
	}
}

// KafkaPublisher returns watermill-kafka's publisher with the partitioning marshaler keyed
// by keyFn (nil: the default marshaler, no key), closed at the end of the test.
func KafkaPublisher(t testing.TB, brokers []string, keyFn kafka.GeneratePartitionKey) *kafka.Publisher {
	t.Helper()
	p, err := NewKafkaPublisher(brokers, keyFn)
	if err != nil {
		t.Fatalf("kafka publisher: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// NewKafkaPublisher is KafkaPublisher without a testing.TB (child processes).
func NewKafkaPublisher(brokers []string, keyFn kafka.GeneratePartitionKey) (*kafka.Publisher, error) {
	cfg := kafka.DefaultSaramaSyncPublisherConfig()
	cfg.Version = saramaVersion
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	var m kafka.Marshaler = kafka.DefaultMarshaler{}
	if keyFn != nil {
		m = kafka.NewWithPartitioningMarshaler(keyFn)
	}
	return kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:               brokers,
		Marshaler:             m,
		OverwriteSaramaConfig: cfg,
	}, watermill.NopLogger{})
}

// KafkaSubscriber returns a subscriber without a consumer group that reads every
// partition from the oldest offset, closed at the end of the test.
func KafkaSubscriber(t testing.TB, brokers []string) *kafka.Subscriber {
	t.Helper()
	cfg := kafka.DefaultSaramaSubscriberConfig()
	cfg.Version = saramaVersion
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	s, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: cfg,
		ReconnectRetrySleep:   100 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("kafka subscriber: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Consume subscribes to topic and feeds every message to fn, acking it, until the test
// ends. The partition and offset of each message are in its context (kafka.MessagePartitionFromCtx).
func Consume(t testing.TB, sub message.Subscriber, topic string, fn func(*message.Message)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			fn(m)
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
}
