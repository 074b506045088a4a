package e2e_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/e2e/internal/brokers"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestE2E_RabbitMQAndKafka: messages published through the outbox (in a real router,
// forwarder added with AddToRouter) arrive at RabbitMQ and at Kafka with their UUID,
// metadata and payload intact. With watermill-kafka's partitioning marshaler keyed by
// the outbox ordering key, each key lands on one partition and per-key order holds on
// the consumer.
func TestE2E_RabbitMQAndKafka(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testRabbitMQAndKafka(t, e)
		})
	}
}

func testRabbitMQAndKafka(t *testing.T, e chaos.Engine) {
	db, _ := e.Open(t)
	amqpURL := testenv.DSN(t, testenv.AMQP)
	store := e.Table(t, db, 16)

	kafkaTopic := chaos.UniqueName("orders_")
	amqpTopic := chaos.UniqueName("outbox_e2e_")
	addrs := brokers.StartKafka(t, kafkaTopic)
	kafkaPub := brokers.KafkaPublisher(t, addrs, brokers.KeyFromMetadata(publisher.MetadataOrderingKey))
	amqpCfg := brokers.AMQPConfig(amqpURL)
	amqpSub := brokers.AMQPSubscriber(t, amqpCfg, amqpTopic) // declares the queue first
	amqpPub := brokers.AMQPPublisher(t, amqpCfg)

	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"kafka": kafkaPub, "amqp": amqpPub}, forwarder.Config{
		HandlerName: "outbox_e2e",
	})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fwd.AddToRouter(router); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-routerDone; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	<-router.Running()

	// Consumers first: Kafka from the oldest offset, RabbitMQ from the declared queue.
	var mu sync.Mutex
	got := map[string]*message.Message{}
	kafkaRec, amqpRec := chaos.NewRecorder(), chaos.NewRecorder()
	partitions := map[string]map[int32]bool{}
	brokers.Consume(t, brokers.KafkaSubscriber(t, addrs), kafkaTopic, func(m *message.Message) {
		kafkaRec.RecordMessage(m)
		p, _ := kafka.MessagePartitionFromCtx(m.Context())
		mu.Lock()
		got[m.UUID] = m
		k := m.Metadata.Get(chaos.KeyMetadata)
		if partitions[k] == nil {
			partitions[k] = map[int32]bool{}
		}
		partitions[k][p] = true
		mu.Unlock()
	})
	brokers.Consume(t, amqpSub, amqpTopic, func(m *message.Message) {
		amqpRec.RecordMessage(m)
		mu.Lock()
		got[m.UUID] = m
		mu.Unlock()
	})

	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const keys, perTx = 10, 20
	kafkaMsgs := chaos.KeyedMessages(400, keys, kafkaTopic)
	amqpMsgs := append(chaos.KeyedMessages(100, 5, amqpTopic), chaos.KeyedMessages(100, 0, amqpTopic)...)
	for _, m := range kafkaMsgs {
		m.Metadata.Set(publisher.MetadataTransport, "kafka")
		m.Metadata.Set("trace_id", watermill.NewShortUUID())
	}
	for _, m := range amqpMsgs {
		m.Metadata.Set(publisher.MetadataTransport, "amqp")
		m.Metadata.Set("unicode", "żółw ✓")
	}
	if _, err := chaos.WriteAll(ctx, ob, db, kafkaTopic, kafkaMsgs, 2, perTx); err != nil {
		t.Fatal(err)
	}
	if _, err := chaos.WriteAll(ctx, ob, db, amqpTopic, amqpMsgs, 2, perTx); err != nil {
		t.Fatal(err)
	}
	if !kafkaRec.WaitUnique(len(kafkaMsgs), 15*time.Second, 45*time.Second) {
		t.Errorf("kafka: %v", kafkaRec.Summary())
	}
	if !amqpRec.WaitUnique(len(amqpMsgs), 15*time.Second, 45*time.Second) {
		t.Errorf("amqp: %v", amqpRec.Summary())
	}
	chaos.CheckDelivered(t, kafkaRec, chaos.UUIDsOf(kafkaMsgs))
	chaos.CheckDelivered(t, amqpRec, chaos.UUIDsOf(amqpMsgs))

	mu.Lock()
	defer mu.Unlock()
	for _, want := range append(kafkaMsgs, amqpMsgs...) {
		m := got[want.UUID]
		if m == nil {
			continue // reported above
		}
		if !bytes.Equal(m.Payload, want.Payload) {
			t.Errorf("%s: payload %q, want %q", want.UUID, m.Payload, want.Payload)
		}
		for k, v := range want.Metadata {
			if m.Metadata.Get(k) != v {
				t.Errorf("%s: metadata %s = %q, want %q", want.UUID, k, m.Metadata.Get(k), v)
			}
		}
	}
	for k, ps := range partitions {
		if len(ps) != 1 {
			t.Errorf("kafka: key %q spread over partitions %v (the ordering key must be the Kafka key)", k, ps)
		}
	}
	if len(partitions) != keys {
		t.Errorf("kafka: %d keys seen, want %d", len(partitions), keys)
	}
}
