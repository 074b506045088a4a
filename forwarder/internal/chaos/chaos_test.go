package chaos_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/forwarder/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

func TestRecorderOrderAndDuplicates(t *testing.T) {
	r := chaos.NewRecorder()
	r.Record("a0", "a", 0)
	r.Record("a1", "a", 1)
	r.Record("a0", "a", 0) // replay after a crash: duplicate, not a violation
	r.Record("a1", "a", 1)
	r.Record("a2", "a", 2)
	r.Record("b1", "b", 1)
	r.Record("b0", "b", 0) // first delivery of b0 after b1: violation
	r.Record("u", "", -1)
	s := r.Summary()
	if s.Deliveries != 8 || s.Unique != 6 || s.Duplicates != 2 || len(s.Violations) != 1 {
		t.Fatalf("summary %v %v", s, s.Violations)
	}
	if m := r.Missing([]string{"a0", "zz", "b0"}); len(m) != 1 || m[0] != "zz" {
		t.Fatalf("missing %v", m)
	}
}

func TestKafkaKeyedRoundTrip(t *testing.T) {
	topic := "chaos_selftest"
	brokers := chaos.StartKafka(t, topic)
	pub := chaos.KafkaPublisher(t, brokers, chaos.KeyFromMetadata(chaos.KeyMetadata))
	sub := chaos.KafkaSubscriber(t, brokers)
	rec := chaos.NewRecorder()
	var mu sync.Mutex
	keys := map[string]map[int32]bool{}
	chaos.Consume(t, sub, topic, func(m *message.Message) {
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
	cfg := chaos.AMQPConfig(url)
	topic := chaos.UniqueName("chaos_selftest_")
	sub := chaos.AMQPSubscriber(t, cfg, topic)
	pub := chaos.AMQPPublisher(t, cfg)
	for i := 0; i < 10; i++ {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set("a", "b")
		if err := pub.Publish(topic, m); err != nil {
			t.Fatal(err)
		}
	}
	if d := chaos.QueueDepth(t, cfg, topic); d != 10 {
		t.Fatalf("queue depth %d", d)
	}
	rec := chaos.NewRecorder()
	chaos.Consume(t, sub, topic, rec.RecordMessage)
	if !rec.WaitUnique(10, 5*time.Second, 10*time.Second) {
		t.Fatal(rec.Summary())
	}
}

func TestMariaDBKillUserConnections(t *testing.T) {
	dsn := testenv.DSN(t, testenv.MySQL)
	root, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() }) // after MariaDBUser's cleanup, which uses it
	user, udsn := chaos.MariaDBUser(t, root, dsn)
	db, err := sql.Open("mysql", udsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(4)
	ctx := context.Background()
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		if err := conns[i].PingContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	n, err := chaos.KillUserConnections(ctx, root, user)
	if err != nil || n != 3 {
		t.Fatalf("killed %d: %v", n, err)
	}
	// The pool notices and reconnects on its own.
	var one int
	for i := 0; i < 5; i++ {
		if err = db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no recovery after kill: %v", err)
	}
}
