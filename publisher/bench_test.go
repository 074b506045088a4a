package publisher_test

import (
	"context"
	"fmt"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// benchMessages returns n messages like an application's events: a 256-byte payload and
// three metadata entries, one of them the ordering key (16 keys).
func benchMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		m := message.NewMessage(fmt.Sprintf("0b6f3b9e-6c1d-4e2f-8a9b-%012d", i), make([]byte, 256))
		m.Metadata.Set(publisher.MetadataOrderingKey, fmt.Sprintf("customer-%d", i%16))
		m.Metadata.Set(publisher.MetadataMessageType, "OrderPlaced")
		m.Metadata.Set("correlation_id", "c0ffee-c0ffee")
		msgs[i] = m
	}
	return msgs
}

// baseline is the hand-written equivalent of one outbox commit: the same business INSERT
// and one multi-row INSERT of the same rows (ids, lanes and encoded headers computed the
// same way) in one transaction, with the statement text built once.
type baseline struct {
	e    *env
	stmt string
	args []any
}

func newBaseline(e *env, n int) *baseline {
	var b strings.Builder
	fmt.Fprintf(&b, "INSERT INTO %s (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at) VALUES ", e.outbox)
	p := 0
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range 12 {
			if c > 0 {
				b.WriteByte(',')
			}
			p++
			b.WriteString(e.d.ph(p))
		}
		b.WriteByte(')')
	}
	return &baseline{e: e, stmt: b.String(), args: make([]any, 0, 12*n)}
}

func (bl *baseline) run(ctx context.Context, orderID int, topic string, msgs []*message.Message) error {
	tx, err := bl.e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := bl.e.insertOrder(ctx, tx, orderID, "order"); err != nil {
		return err
	}
	now := time.Now().UTC()
	args := bl.args[:0]
	for _, m := range msgs {
		id := outbox.NewID()
		key := m.Metadata.Get(publisher.MetadataOrderingKey)
		args = append(args, id[:], m.UUID, lanes.Of(key, bl.e.opts.Lanes), key, "", topic,
			m.Metadata.Get(publisher.MetadataMessageType), headercodec.EncodeMetadata(nil, m.Metadata), []byte(m.Payload), nil, now, now)
	}
	if _, err := tx.ExecContext(ctx, bl.stmt, args...); err != nil {
		return err
	}
	clear(args)
	return tx.Commit()
}

// allocSample is reused so that reading the counter allocates nothing itself
// (benchmarks run on one goroutine).
var allocSample = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}

// allocs reads the process's cumulative heap allocation count (cheap, no stop-the-world).
func allocs() uint64 {
	metrics.Read(allocSample)
	return allocSample[0].Value.Uint64()
}

// BenchmarkPublishCommit measures, side by side in one loop, a transaction made with the
// outbox (Begin, business INSERT, Publish of n messages, Commit) and the baseline doing
// the same by hand. The two alternate which goes first. Metrics:
//
//	outbox-ns/op, baseline-ns/op  one transaction each (ns/op is their sum)
//	ratio                         median over iterations of outbox / baseline, each pair
//	                              run back to back (robust to load on a shared machine);
//	                              goal <= 1.10
//	sum-ratio                     total outbox time / total baseline time
//	publish-allocs/msg            allocations of Publish alone (goal: 1, the owned buffer)
//	outbox-allocs/msg             allocations of the whole outbox transaction per message,
//	                              store Insert and driver included
//	baseline-allocs/msg           the same for the baseline
func BenchmarkPublishCommit(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.name, func(b *testing.B) {
			e := newEnv(b, d, outbox.LanesDefault)
			ob := e.newOutbox(b, publisher.Config{})
			ctx := context.Background()
			orderID := 0
			for _, n := range []int{1, 64, 1000} {
				msgs := benchMessages(n)
				bl := newBaseline(e, n)
				var publishAllocs uint64
				runOutbox := func() error {
					orderID++
					tx, err := ob.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					if err := e.insertOrder(ctx, tx.SQLTx(), orderID, "order"); err != nil {
						return err
					}
					a := allocs()
					for _, m := range msgs {
						if err := tx.Publish("orders", m); err != nil {
							return err
						}
					}
					publishAllocs += allocs() - a
					return tx.Commit(ctx)
				}
				runBaseline := func() error {
					orderID++
					return bl.run(ctx, orderID, "orders", msgs)
				}
				// Warm both paths (prepared statements, pooled buffers, connections).
				for range 3 {
					if err := runOutbox(); err != nil {
						b.Fatal(err)
					}
					if err := runBaseline(); err != nil {
						b.Fatal(err)
					}
				}
				b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
					publishAllocs = 0
					var outNs, baseNs time.Duration
					var outAllocs, baseAllocs uint64
					var ratios []float64 // per iteration: the two runs saw the same load
					timed := func(f func() error, al *uint64) time.Duration {
						a := allocs()
						start := time.Now()
						if err := f(); err != nil {
							b.Fatal(err)
						}
						d := time.Since(start)
						*al += allocs() - a
						return d
					}
					for i := 0; b.Loop(); i++ {
						var o, bl time.Duration
						if i%2 == 0 {
							o = timed(runOutbox, &outAllocs)
							bl = timed(runBaseline, &baseAllocs)
						} else {
							bl = timed(runBaseline, &baseAllocs)
							o = timed(runOutbox, &outAllocs)
						}
						outNs += o
						baseNs += bl
						ratios = append(ratios, float64(o)/float64(bl))
					}
					slices.Sort(ratios)
					ops := float64(b.N)
					msgsN := ops * float64(n)
					b.ReportMetric(float64(outNs.Nanoseconds())/ops, "outbox-ns/op")
					b.ReportMetric(float64(baseNs.Nanoseconds())/ops, "baseline-ns/op")
					b.ReportMetric(ratios[len(ratios)/2], "ratio")
					b.ReportMetric(float64(outNs)/float64(baseNs), "sum-ratio")
					b.ReportMetric(float64(publishAllocs)/msgsN, "publish-allocs/msg")
					b.ReportMetric(float64(outAllocs)/msgsN, "outbox-allocs/msg")
					b.ReportMetric(float64(baseAllocs)/msgsN, "baseline-allocs/msg")
				})
			}
		})
	}
}

// BenchmarkPublish is Publish alone (no I/O): one message per call into one transaction.
func BenchmarkPublish(b *testing.B) {
	e := newEnv(b, dialects[0], outbox.LanesDefault)
	ob := e.newOutbox(b, publisher.Config{})
	msgs := benchMessages(1)
	b.ReportAllocs()
	var tx *publisher.Tx
	begin := func() {
		var err error
		if tx, err = ob.Begin(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	begin()
	for i := 0; b.Loop(); i++ {
		if i%10000 == 9999 { // keep the buffer bounded
			b.StopTimer()
			tx.Rollback()
			begin()
			b.StartTimer()
		}
		if err := tx.Publish("orders", msgs[0]); err != nil {
			b.Fatal(err)
		}
	}
	tx.Rollback()
}
