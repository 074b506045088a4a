package brokers_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/e2e/internal/brokers"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

func TestKafkaKeyedRoundTrip(t *testing.T) {
	topic := "chaos_selftest"
	addrs := brokers.StartKafka(t, topic)
	pub := brokers.KafkaPublisher(t, addrs, brokers.KeyFromMetadata(chaos.KeyMetadata))
	sub := brokers.KafkaSubscriber(t, addrs)
	rec := chaos.NewRecorder()
	var mu sync.Mutex
	keys := map[string]map[int32]bool{}
	brokers.Consume(t, sub, topic, func(m *message.Message) {
		rec.RecordMessage(m)
		p, _ := kafka.MessagePartitionFromCtx(m.Context())
		k := m.Metadata.Get(chaos.KeyMetadata)
		mu.Lock()
		if keys[k] == nil {
			keys[k] = map[int32]bool{}
		}
		keys[k][p] = true
		mu.Unlock()
	})
	const n = 200
	for i := 0; i < n; i++ {
		m := message.NewMessage(watermill.NewUUID(), []byte("p"+strconv.Itoa(i)))
		m.Metadata.Set(chaos.KeyMetadata, "k"+strconv.Itoa(i%7))
		m.Metadata.Set(chaos.SeqMetadata, strconv.Itoa(i/7))
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
	}
	if !rec.WaitUnique(n, 10*time.Second, 30*time.Second) {
		t.Fatalf("got %v", rec.Summary())
	}
	mu.Lock()
	defer mu.Unlock()
	for k, parts := range keys {
		if len(parts) != 1 {
			t.Errorf("key %s spread over partitions %v", k, parts)
		}
	}
	if s := rec.Summary(); len(s.Violations) > 0 {
		t.Fatal(s.Violations)
	}
}

func TestAMQPRoundTrip(t *testing.T) {
	url := testenv.DSN(t, testenv.AMQP)
	cfg := brokers.AMQPConfig(url)
	topic := chaos.UniqueName("chaos_selftest_")
	sub := brokers.AMQPSubscriber(t, cfg, topic)
	pub := brokers.AMQPPublisher(t, cfg)
	for i := 0; i < 10; i++ {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set("a", "b")
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
	}
	if d := brokers.QueueDepth(t, cfg, topic); d != 10 {
		t.Fatalf("queue depth %d", d)
	}
	rec := chaos.NewRecorder()
	brokers.Consume(t, sub, topic, rec.RecordMessage)
	if !rec.WaitUnique(10, 5*time.Second, 10*time.Second) {
		t.Fatal(rec.Summary())
	}
}
