package forwarder_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/forwarder/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/pubbench"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

func brokerBenchRows() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_BROKER_ROWS")); err == nil && n > 0 {
		return n
	}
	return 10_000
}

// countingPublisher counts messages its target accepted.
type countingPublisher struct {
	next message.Publisher
	n    atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.next.Publish(topic, msgs...); err != nil {
		return err
	}
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *countingPublisher) Close() error { return nil }
func (p *countingPublisher) Count() int64 { return p.n.Load() }

// rawPublish publishes n messages like the forwarder's (200-byte payload, three metadata
// entries) with `workers` goroutines through pub and returns messages/s.
func rawPublish(tb testing.TB, pub message.Publisher, topic string, n, workers int) float64 {
	tb.Helper()
	msgs := make([]*message.Message, n)
	body := []byte(strings.Repeat("x", 200))
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), body)
		msgs[i].Metadata = message.Metadata{"trace_id": "0123456789abcdef", "type": "order.created", "v": "1"}
	}
	start := time.Now()
	if err := pubbench.Concurrently(pub, topic, msgs, workers); err != nil {
		tb.Fatalf("raw %v", err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkForwardToBroker: forwarding a backlog of unordered rows to RabbitMQ and to
// Kafka (kfake) against publishing the same number of equal messages directly through a
// publisher with the same configuration, with as many concurrent publishers as the
// forwarder's in-flight window. Reports the rates and ratios (goal >= 0.7) of the default
// Config and of UnorderedLocking, and the database-backed ceiling: the hand-written SKIP
// LOCKED loop (4 claimers, each publishing its batch through InFlight/4 goroutines at
// once, then deleting it), as loop_msgs/s, its ratio to raw publishing (ratio_loop) and
// UnorderedLocking's ratio to it (locked_vs_loop).
func BenchmarkForwardToBroker(b *testing.B) {
	n := brokerBenchRows()
	inFlight := forwarder.InFlightDefault
	brokers := []struct {
		name string
		pub  func(b *testing.B) (message.Publisher, string)
	}{
		{"amqp", func(b *testing.B) (message.Publisher, string) {
			cfg := chaos.AMQPConfig(testenv.DSN(b, testenv.AMQP))
			topic := chaos.UniqueName("outbox_bench_")
			chaos.AMQPSubscriber(b, cfg, topic) // declare the queue; deleted at the end
			return chaos.AMQPPublisher(b, cfg), topic
		}},
		{"kafka", func(b *testing.B) (message.Publisher, string) {
			topic := chaos.UniqueName("bench_")
			return chaos.KafkaPublisher(b, chaos.StartKafka(b, topic), nil), topic
		}},
	}
	for _, e := range engines {
		for _, br := range brokers {
			b.Run(e.name+"/"+br.name, func(b *testing.B) {
				db, _ := e.open(b)
				var raw, fwd, ratio, locked, ratioLocked, loop, ratioLoop, lockedVsLoop []float64
				for i := 0; i < b.N; i++ {
					for r := 0; r < benchRounds(); r++ {
						pub, topic := br.pub(b)
						st := e.table(b, db, 64)
						fillUnordered(b, e, db, st, n, topic)
						runs := []func(){
							func() { raw = append(raw, rawPublish(b, pub, topic, n, inFlight)) },
							func() {
								st := e.table(b, db, 64)
								fillUnordered(b, e, db, st, n, topic)
								loop = append(loop, baselineLoop(b, e, db, st.Options(), pub, n, 4, inFlight/4))
							},
							func() {
								cp := &countingPublisher{next: pub}
								fwd = append(fwd, forwarderDrain(b, e, db, st, forwarder.Config{}, cp, cp.Count, n).rate)
							},
							func() {
								st := e.table(b, db, 64)
								fillUnordered(b, e, db, st, n, topic)
								cp := &countingPublisher{next: pub}
								locked = append(locked, forwarderDrain(b, e, db, st, forwarder.Config{UnorderedLocking: true}, cp, cp.Count, n).rate)
							},
						}
						if r%2 == 1 {
							slices.Reverse(runs)
						}
						for _, run := range runs {
							run()
						}
						ratio = append(ratio, fwd[len(fwd)-1]/raw[len(raw)-1])
						ratioLocked = append(ratioLocked, locked[len(locked)-1]/raw[len(raw)-1])
						ratioLoop = append(ratioLoop, loop[len(loop)-1]/raw[len(raw)-1])
						lockedVsLoop = append(lockedVsLoop, locked[len(locked)-1]/loop[len(loop)-1])
					}
				}
				b.ReportMetric(median(raw), "raw_msgs/s")
				b.ReportMetric(median(fwd), "fwd_msgs/s")
				b.ReportMetric(median(ratio), "ratio")
				b.ReportMetric(median(locked), "fwdlocked_msgs/s")
				b.ReportMetric(median(ratioLocked), "ratio_locked")
				b.ReportMetric(median(loop), "loop_msgs/s")
				b.ReportMetric(median(ratioLoop), "ratio_loop")
				b.ReportMetric(median(lockedVsLoop), "locked_vs_loop")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
