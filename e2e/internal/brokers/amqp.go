package brokers

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// AMQPChannelPool is the publisher channel pool size: 0 would open a channel per Publish.
const AMQPChannelPool = 32

// AMQPConfig is the durable-queue configuration (default exchange, queue named after the
// topic) with a channel pool and publisher confirms.
func AMQPConfig(url string) amqp.Config {
	cfg := amqp.NewDurableQueueConfig(url)
	cfg.Publish.ChannelPoolSize = AMQPChannelPool
	cfg.Publish.ConfirmDelivery = true
	return cfg
}

// AMQPPublisher returns a publisher over cfg, closed at the end of the test.
func AMQPPublisher(t testing.TB, cfg amqp.Config) *amqp.Publisher {
	t.Helper()
	p, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("amqp publisher: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// AMQPSubscriber returns a subscriber over cfg that has declared the queues of topics
// (RabbitMQ drops what is published to a queue that does not exist yet, and
// watermill-amqp reports success anyway). The queues are deleted at the end of the test.
func AMQPSubscriber(t testing.TB, cfg amqp.Config, topics ...string) *amqp.Subscriber {
	t.Helper()
	s, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("amqp subscriber: %v", err)
	}
	for _, topic := range topics {
		if err := s.SubscribeInitialize(topic); err != nil {
			t.Fatalf("declare queue %s: %v", topic, err)
		}
	}
	t.Cleanup(func() {
		_ = s.Close()
		DeleteQueues(t, cfg, topics...)
	})
	return s
}

// DeleteQueues removes the queues of topics (cleanup).
func DeleteQueues(t testing.TB, cfg amqp.Config, topics ...string) {
	conn, err := amqp091.Dial(cfg.Connection.AmqpURI)
	if err != nil {
		t.Logf("amqp cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("amqp cleanup: %v", err)
		return
	}
	defer ch.Close()
	for _, topic := range topics {
		if _, err := ch.QueueDelete(cfg.Queue.GenerateName(topic), false, false, false); err != nil {
			t.Logf("amqp cleanup %s: %v", topic, err)
		}
	}
}

// QueueDepth returns the number of ready messages in topic's queue.
func QueueDepth(t testing.TB, cfg amqp.Config, topic string) int {
	t.Helper()
	conn, err := amqp091.Dial(cfg.Connection.AmqpURI)
	if err != nil {
		t.Fatalf("amqp: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("amqp: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(cfg.Queue.GenerateName(topic), true, false, false, false, nil)
	if err != nil {
		t.Fatalf("amqp inspect %s: %v", topic, err)
	}
	return q.Messages
}
