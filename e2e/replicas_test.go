package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/e2e/internal/brokers"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Environment of a writer replica (besides the forwarder child's envEngine, envDSN,
// envPrefix and envLanes).
const (
	envWriterMode  = "OUTBOX_REPLICA_MODE"    // "lockstep" or "aggregates"
	envWriterIndex = "OUTBOX_REPLICA_INDEX"   // 0..writers-1
	envWriters     = "OUTBOX_REPLICA_WRITERS" // how many replicas write
	envWriterCount = "OUTBOX_REPLICA_COUNT"   // messages this replica commits
	envWriterTopic = "OUTBOX_REPLICA_TOPIC"   // the events' topic (default "replicas")
)

// aggregates is how many aggregate rows the replicas share (row 0 is the lockstep turn).
const aggregates = 5

// errNotMyTurn rolls a lockstep transaction back when the other replica's turn is due.
var errNotMyTurn = errors.New("not this replica's turn")

// TestHelperWriter is not a test: a writer replica, re-executed by
// TestE2E_WriterReplicas, commits its events through the publisher and exits.
func TestHelperWriter(t *testing.T) {
	if chaos.ChildRole() != "writer" {
		t.Skip("helper process for TestE2E_WriterReplicas")
	}
	var e chaos.Engine
	for _, c := range chaos.Engines {
		if c.Name == os.Getenv(envEngine) {
			e = c
		}
	}
	db := e.OpenDSN(t, os.Getenv(envDSN))
	laneCount, _ := strconv.Atoi(os.Getenv(envLanes))
	store, err := e.NewStore(db, outbox.Options{TablePrefix: os.Getenv(envPrefix), Lanes: laneCount})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := publisher.New(store, publisher.Config{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	me, _ := strconv.Atoi(os.Getenv(envWriterIndex))
	writers, _ := strconv.Atoi(os.Getenv(envWriters))
	count, _ := strconv.Atoi(os.Getenv(envWriterCount))
	w := replica{e: e, ob: ob, agg: e.Qualify(store.Options(), store.Options().TablePrefix+"agg"), me: me, writers: writers, topic: "replicas"}
	if topic := os.Getenv(envWriterTopic); topic != "" {
		w.topic = topic
	}
	chaos.SignalReady()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for done := 0; done < count; {
		err := w.commit(ctx, os.Getenv(envWriterMode))
		switch {
		case err == nil:
			done++
		case errors.Is(err, errNotMyTurn):
			time.Sleep(100 * time.Microsecond)
		case ctx.Err() != nil:
			t.Fatalf("replica %d: %d of %d committed: %v", me, done, count, err)
		default:
			// a deadlock or lock wait on the aggregate rows: the transaction rolled back
		}
	}
}

// replica is one writer process: it reads and raises an aggregate's version under a row
// lock and publishes "<aggregate>:<version>" with the aggregate as ordering key.
type replica struct {
	e           chaos.Engine
	ob          *publisher.Outbox
	agg, topic  string
	me, writers int
}

func (w replica) commit(ctx context.Context, mode string) error {
	return w.ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
		id := 1 + rand.IntN(aggregates)
		if mode == "lockstep" {
			id = 0
		}
		ph := placeholder(w.e)
		var version int
		if err := tx.SQLTx().QueryRowContext(ctx, "SELECT version FROM "+w.agg+" WHERE id = "+ph(1)+" FOR UPDATE", id).Scan(&version); err != nil {
			return err
		}
		if mode == "lockstep" && version%w.writers != w.me {
			return errNotMyTurn
		}
		if _, err := tx.SQLTx().ExecContext(ctx, "UPDATE "+w.agg+" SET version = version + 1 WHERE id = "+ph(1), id); err != nil {
			return err
		}
		key := "agg-" + strconv.Itoa(id)
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("%s:%d", key, version+1)))
		msg.Metadata.Set(publisher.MetadataOrderingKey, key)
		msg.Metadata.Set(chaos.KeyMetadata, key)
		msg.Metadata.Set(chaos.SeqMetadata, strconv.Itoa(version+1))
		return tx.Publish(w.topic, msg)
	})
}

func placeholder(e chaos.Engine) func(int) string {
	if e.Driver == "pgx" {
		return func(i int) string { return "$" + strconv.Itoa(i) }
	}
	return func(int) string { return "?" }
}

// TestE2E_WriterReplicas: writer processes of one service, as replicas run, write the
// same keys, and a forwarder delivers every event of a key in commit order, whatever
// the replicas' clocks and ids.
//   - lockstep: two replicas commit one key strictly in turn (each transaction begins
//     after the other replica's commit, waiting on the turn row's lock);
//   - aggregates: four replicas each lock one of five aggregate rows, raise its version
//     and publish "<aggregate>:<version>" keyed by the aggregate.
//
// Before lanes were ordered by a database-assigned seq, 105-126 of 600 lockstep events
// and 13-28 of 2,000 aggregate events arrived out of order here.
func TestE2E_WriterReplicas(t *testing.T) {
	for _, mode := range []struct {
		name           string
		writers, count int
	}{{"lockstep", 2, 300}, {"aggregates", 4, 500}} {
		for _, e := range chaos.Engines {
			t.Run(mode.name+"/"+e.Name, func(t *testing.T) {
				testReplicas(t, e, mode.name, mode.writers, mode.count)
			})
		}
	}
}

func testReplicas(t *testing.T, e chaos.Engine, mode string, writers, count int) {
	const lanesN = 16
	db, dsn := e.Open(t)
	store := e.Table(t, db, lanesN)
	opts := store.Options()
	agg := e.Qualify(opts, opts.TablePrefix+"agg")
	createAggregates(t, db, agg)

	children := make([]*chaos.Child, writers)
	for i := range children {
		children[i] = chaos.StartChild(t, "TestHelperWriter", "writer",
			envEngine+"="+e.Name, envDSN+"="+dsn, envPrefix+"="+opts.TablePrefix, envLanes+"="+strconv.Itoa(lanesN),
			envWriterMode+"="+mode, envWriterIndex+"="+strconv.Itoa(i), envWriters+"="+strconv.Itoa(writers),
			envWriterCount+"="+strconv.Itoa(count))
	}
	for i, c := range children {
		chaos.WaitFor(t, 3*time.Minute, fmt.Sprintf("writer %d to finish", i), func() bool { done, _ := c.Exited(); return done })
		if _, err := c.Exited(); err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	rec := chaos.NewRecorder()
	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"": recordingTarget{rec}}, forwarder.Config{})
	chaos.RunForwarder(t, fwd)
	total := writers * count
	if !rec.WaitUnique(total, 30*time.Second, 2*time.Minute) {
		t.Fatalf("%d of %d events delivered", rec.Unique(), total)
	}
	s := rec.Summary()
	t.Logf("%s on %s: %v", mode, e.Name, s)
	if len(s.Violations) > 0 {
		t.Errorf("%d of %d events out of commit order: %v", len(s.Violations), total, s.Violations[:min(10, len(s.Violations))])
	}
}

// createAggregates creates the replicas' aggregate rows (row 0: the lockstep turn), all
// at version 0, dropped at the end of the test.
func createAggregates(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY, version INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table)
	})
	for id := 0; id <= aggregates; id++ {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (id, version) VALUES (%d, 0)", table, id)); err != nil {
			t.Fatal(err)
		}
	}
}

// recordingTarget records every message it is given (it never fails).
type recordingTarget struct{ rec *chaos.Recorder }

func (r recordingTarget) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		r.rec.RecordMessage(m)
	}
	return nil
}

func (recordingTarget) Close() error { return nil }

// TestE2E_WriterReplicasKilled: four writer replicas on five shared aggregates commit
// through the outbox while three forwarders (two in processes of their own) send to
// Kafka; one writer and one forwarder process are SIGKILLed in the middle and started
// again. Every committed event (each aggregate's versions 1..final, read back from the
// aggregate rows) is delivered, and no key's events arrive out of version order.
// Full size behind OUTBOX_TEST_FULL (make chaos).
func TestE2E_WriterReplicasKilled(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) { testReplicasKilled(t, e) })
	}
}

func testReplicasKilled(t *testing.T, e chaos.Engine) {
	const lanesN, writers = 16, 4
	count := 150
	if chaos.FullRun() {
		count = 2500
	}
	db, dsn := e.Open(t)
	store := e.Table(t, db, lanesN)
	opts := store.Options()
	createAggregates(t, db, e.Qualify(opts, opts.TablePrefix+"agg"))
	topic := chaos.UniqueName("replicas_")
	addrs := brokers.StartKafka(t, topic)
	rec := chaos.NewRecorder()
	brokers.Consume(t, brokers.KafkaSubscriber(t, addrs), topic, rec.RecordMessage)
	pub := brokers.KafkaPublisher(t, addrs, brokers.KeyFromMetadata(publisher.MetadataOrderingKey))
	chaos.RunForwarder(t, chaos.NewForwarder(t, store, forwarder.Targets{"": pub}, forwarder.Config{Owner: "parent", LeaseTTL: crashLeaseTTL, ClaimTTL: crashClaimTTL()}))
	forwarderEnv := func(owner string) []string {
		return []string{envEngine + "=" + e.Name, envDSN + "=" + dsn, envPrefix + "=" + opts.TablePrefix,
			envLanes + "=" + strconv.Itoa(lanesN), envBrokers + "=" + strings.Join(addrs, ","),
			envOwner + "=" + owner, envLease + "=" + crashLeaseTTL.String()}
	}
	startWriter := func(i int) *chaos.Child {
		return chaos.StartChild(t, "TestHelperWriter", "writer",
			envEngine+"="+e.Name, envDSN+"="+dsn, envPrefix+"="+opts.TablePrefix, envLanes+"="+strconv.Itoa(lanesN),
			envWriterMode+"=aggregates", envWriterIndex+"="+strconv.Itoa(i), envWriters+"="+strconv.Itoa(writers),
			envWriterCount+"="+strconv.Itoa(count), envWriterTopic+"="+topic)
	}
	fwd := []*chaos.Child{chaos.StartChild(t, "TestHelperProcess", "forwarder", forwarderEnv("child-0")...),
		chaos.StartChild(t, "TestHelperProcess", "forwarder", forwarderEnv("child-1")...)}
	ws := make([]*chaos.Child, writers)
	for i := range ws {
		ws[i] = startWriter(i)
	}
	// Kill a writer and a forwarder process once a quarter of the events went out.
	rec.WaitUnique(writers*count/4, 30*time.Second, time.Minute)
	ws[0].Kill()
	fwd[0].Kill()
	t.Logf("SIGKILLed writer 0 and forwarder child-0 after %d deliveries", rec.Unique())
	ws = append(ws, startWriter(0))
	fwd = append(fwd, chaos.StartChild(t, "TestHelperProcess", "forwarder", forwarderEnv("child-2")...))
	for i, c := range ws[1:] {
		chaos.WaitFor(t, 3*time.Minute, fmt.Sprintf("writer %d to finish", i+1), func() bool { done, _ := c.Exited(); return done })
		if _, err := c.Exited(); err != nil {
			t.Fatalf("writer %d: %v", i+1, err)
		}
	}
	committed := 0
	rows, err := db.QueryContext(t.Context(), "SELECT version FROM "+e.Qualify(opts, opts.TablePrefix+"agg")+" WHERE id > 0")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		committed += v
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if !rec.WaitUnique(committed, 30*time.Second, 3*time.Minute) {
		t.Fatalf("%d of %d committed events delivered", rec.Unique(), committed)
	}
	s := rec.Summary()
	t.Logf("%s: %d committed events: %v", e.Name, committed, s)
	if len(s.Violations) > 0 {
		t.Errorf("%d events out of version order: %v", len(s.Violations), s.Violations[:min(10, len(s.Violations))])
	}
}
