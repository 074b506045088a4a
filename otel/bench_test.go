package otel_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	outboxotel "github.com/relayer-go/watermill-outbox/otel"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// BenchmarkPublishOverhead: 1,000 messages published (one Publish call each) and
// committed in one MariaDB transaction, with and without otel.ExtraMetadata, in
// interleaved rounds. It reports each variant's ns per message for the Publish calls
// alone (the CPU the hook adds) and for the whole transaction, and their ratios
// (hook / none): with no tracer provider set (the context has no span) the hook adds
// nothing. "traced" is the cost when the transaction's context holds a recording span.
func BenchmarkPublishOverhead(b *testing.B) {
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
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(ctx) }()
	tracedCtx, span := tp.Tracer("bench").Start(ctx, "tx")
	defer span.End()

	variants := []struct {
		name string
		ctx  context.Context
		ob   *publisher.Outbox
	}{
		{"none", ctx, newOutbox(b, store, nil)},
		{"hook", ctx, newOutbox(b, store, outboxotel.ExtraMetadata(outboxotel.Config{}))},
		{"traced", tracedCtx, newOutbox(b, store, outboxotel.ExtraMetadata(outboxotel.Config{}))},
	}
	msgs := make([]*message.Message, 1000)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("m-%d", i), []byte(`{"order":42,"amount":"12.50"}`))
		msgs[i].Metadata.Set("name", "OrderPlaced")
	}
	publish := make([]time.Duration, len(variants))
	total := make([]time.Duration, len(variants))
	for b.Loop() {
		for i, v := range variants {
			p, all := publishRound(b, v.ctx, v.ob, msgs)
			publish[i] += p
			total[i] += all
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*len(msgs)) }
	for i, v := range variants {
		b.ReportMetric(per(publish[i]), "publish-ns/msg-"+v.name)
		b.ReportMetric(per(total[i]), "tx-ns/msg-"+v.name)
	}
	b.ReportMetric(float64(publish[1])/float64(publish[0]), "publish-ratio-hook/none")
	b.ReportMetric(float64(total[1])/float64(total[0]), "tx-ratio-hook/none")
	b.ReportMetric(float64(total[2])/float64(total[0]), "tx-ratio-traced/none")
	b.ReportMetric(0, "ns/op")
}

func newOutbox(b testing.TB, store outbox.Store, extra func(context.Context, string, *message.Message) (message.Metadata, error)) *publisher.Outbox {
	ob, err := publisher.New(store, publisher.Config{ExtraMetadata: extra}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return ob
}

// publishRound publishes msgs in one transaction and returns the time of the Publish
// calls and of the whole transaction (Begin to Commit).
func publishRound(b *testing.B, ctx context.Context, ob *publisher.Outbox, msgs []*message.Message) (publish, total time.Duration) {
	start := time.Now()
	tx, err := ob.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	p := time.Now()
	for _, m := range msgs {
		if err := tx.Publish("orders", m); err != nil {
			b.Fatal(err)
		}
	}
	publish = time.Since(p)
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	// Keep the table small: the rows are deleted outside the timing.
	total = time.Since(start)
	if _, err := ob.Store().DB().ExecContext(ctx, "DELETE FROM "+mysql.QualifiedTable(ob.Store().Options(), ob.Store().Options().OutboxTable())); err != nil {
		b.Fatal(err)
	}
	return publish, total
}
