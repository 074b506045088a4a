package otel_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	outboxotel "github.com/relayer-go/watermill-outbox/otel"
)

// countingTarget counts the messages published to it.
type countingTarget struct{ n atomic.Int64 }

func (c *countingTarget) Publish(_ string, msgs ...*message.Message) error {
	c.n.Add(int64(len(msgs)))
	return nil
}
func (c *countingTarget) Close() error { return nil }

// BenchmarkDrainOverhead: a MariaDB backlog of 5,000 rows (half over 8 lanes, half
// unordered) drained by a forwarder (Run) into a target that only counts, with the
// target bare and wrapped by otel.WrapTarget, in interleaved rounds, with no tracer
// provider set (the global no-op one). It reports each variant's ns per message from
// the forwarder's start to the last message and their ratio (wrapped / bare).
func BenchmarkDrainOverhead(b *testing.B) {
	db, err := sql.Open("mysql", testenv.DSN(b, testenv.MySQL))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	store, err := mysql.New(db, outbox.Options{TablePrefix: testenv.Prefix(b), Lanes: 8})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreateSchema(ctx); err != nil {
		testenv.Unavailable(b, testenv.MySQL, err)
	}
	defer func() {
		for _, tb := range store.Options().TableNames() {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + mysql.QualifiedTable(store.Options(), tb))
		}
	}()
	const n = 5000
	var bare, wrapped time.Duration
	for b.Loop() {
		for _, wrap := range []bool{false, true} {
			d := drainRound(b, ctx, store, n, wrap)
			if wrap {
				wrapped += d
			} else {
				bare += d
			}
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*n) }
	b.ReportMetric(per(bare), "ns/msg-bare")
	b.ReportMetric(per(wrapped), "ns/msg-wrapped")
	b.ReportMetric(float64(wrapped)/float64(bare), "ratio-wrapped/bare")
	b.ReportMetric(0, "ns/op")
}

// drainRound fills the backlog, then times a new forwarder draining it.
func drainRound(b *testing.B, ctx context.Context, store outbox.Store, n int, wrap bool) time.Duration {
	recs := make([]outbox.Record, n)
	now := time.Now().UTC()
	for i := range recs {
		recs[i] = outbox.Record{ID: outbox.NewID(), MessageUUID: fmt.Sprintf("m-%d", i), Lane: outbox.Unordered, Destination: "orders",
			Headers: []byte{1, 0, 0, 0, 0, 0, 0, 0}, Body: []byte(`{"order":42}`), CreatedAt: now}
		if i%2 == 1 {
			recs[i].Lane, recs[i].OrderingKey = i%8, fmt.Sprintf("k-%d", i%8)
		}
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Insert(ctx, tx, recs); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	target := &countingTarget{}
	var pub message.Publisher = target
	if wrap {
		pub = outboxotel.WrapTarget(pub, outboxotel.TargetConfig{})
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fwd.Run(runCtx) }()
	for target.n.Load() < int64(n) {
		time.Sleep(200 * time.Microsecond)
	}
	d := time.Since(start)
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		b.Fatal(err)
	}
	// Rows acked but not yet deleted when Run stopped are sent again by the next round's
	// forwarder: delete what is left.
	if _, err := store.DB().ExecContext(ctx, "DELETE FROM "+mysql.QualifiedTable(store.Options(), store.Options().OutboxTable())); err != nil {
		b.Fatal(err)
	}
	return d
}

// capturingTarget keeps the messages published to it.
type capturingTarget struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (c *capturingTarget) Publish(_ string, msgs ...*message.Message) error {
	c.mu.Lock()
	c.msgs = append(c.msgs, msgs...)
	c.mu.Unlock()
	return nil
}
func (c *capturingTarget) Close() error { return nil }

func (c *capturingTarget) len() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.msgs) }

// BenchmarkWrapTargetCPU: the Go CPU otel.WrapTarget adds to each message a forwarder
// sends, with no tracer provider set and with a recording SDK provider: 200 messages
// a real forwarder emitted (their contexts carry their rows) are published one call
// each through the bare and the wrapped target, in turns. It reports ns and allocations
// per message of each.
func BenchmarkWrapTargetCPU(b *testing.B) {
	msgs := forwardedMessages(b, 200)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	variants := []struct {
		name string
		pub  message.Publisher
	}{
		{"bare", &countingTarget{}},
		{"wrapped-noop", outboxotel.WrapTarget(&countingTarget{}, outboxotel.TargetConfig{})},
		{"wrapped-sdk", outboxotel.WrapTarget(&countingTarget{}, outboxotel.TargetConfig{Config: outboxotel.Config{TracerProvider: tp}, System: "rabbitmq"})},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range msgs {
					if err := v.pub.Publish("orders", m); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
		})
	}
}

// forwardedMessages runs a forwarder over n MariaDB rows into a capturing target and
// returns the messages it sent.
func forwardedMessages(b testing.TB, n int) []*message.Message {
	db, err := sql.Open("mysql", testenv.DSN(b, testenv.MySQL))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	store, err := mysql.New(db, outbox.Options{TablePrefix: testenv.Prefix(b), Lanes: 8})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreateSchema(ctx); err != nil {
		testenv.Unavailable(b, testenv.MySQL, err)
	}
	defer func() {
		for _, tb := range store.Options().TableNames() {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + mysql.QualifiedTable(store.Options(), tb))
		}
	}()
	recs := make([]outbox.Record, n)
	for i := range recs {
		recs[i] = outbox.Record{ID: outbox.NewID(), MessageUUID: fmt.Sprintf("m-%d", i), Lane: outbox.Unordered, Destination: "orders",
			Headers: headercodec.EncodeMetadata(nil, message.Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
			Body:    []byte(`{"order":42}`), CreatedAt: time.Now().UTC()}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Insert(ctx, tx, recs); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	target := &capturingTarget{}
	fwd, err := forwarder.New(store, forwarder.Targets{"": target}, forwarder.Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fwd.Run(runCtx) }()
	for deadline := time.Now().Add(30 * time.Second); target.len() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the forwarder sent %d of %d messages in 30 s", target.len(), n)
		}
	}
	cancel()
	<-done
	return target.msgs[:n]
}
