package e2e_test

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Shared scaffolding of the ordered-lane correctness tests (SIGSTOP, skewed clocks, slow
// keys). They use the library's public API only: outbox rows written by the publisher,
// forwarders built with forwarder.New, and target publishers of their own that record
// what the forwarders send.

// orderedMessages returns a backlog over keys, round robin: message j of key k carries
// k and j (chaos.KeyMetadata, chaos.SeqMetadata) and k as its ordering key. perKey gives
// each key's message count. Keys must be "k<n>" (chaos.WriteAll groups writers by n).
func orderedMessages(topic string, keys []string, perKey func(key string) int) []*message.Message {
	var msgs []*message.Message
	for seq := 0; ; seq++ {
		added := false
		for _, k := range keys {
			if seq >= perKey(k) {
				continue
			}
			added = true
			m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"key":%q,"seq":%d}`, k, seq)))
			m.Metadata.Set(publisher.MetadataOrderingKey, k)
			m.Metadata.Set(chaos.KeyMetadata, k)
			m.Metadata.Set(chaos.SeqMetadata, strconv.Itoa(seq))
			msgs = append(msgs, m)
		}
		if !added {
			return msgs
		}
	}
}

// keysCoveringLanes returns "k0".."k<n-1>" and fails the test unless every one of the
// laneCount lanes holds at least one of them (the tests want every lane busy).
func keysCoveringLanes(t testing.TB, n, laneCount int) []string {
	t.Helper()
	keys := make([]string, n)
	hit := make([]int, laneCount)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		hit[lanes.Of(keys[i], laneCount)]++
	}
	for l, c := range hit {
		if c == 0 {
			t.Fatalf("no key of k0..k%d falls into lane %d of %d", n-1, l, laneCount)
		}
	}
	return keys
}

// writeBacklog commits msgs into the outbox (4 writers, 200 messages per transaction)
// before any forwarder runs, so the test starts with a backlog.
func writeBacklog(t testing.TB, store outbox.Store, db *sql.DB, topic string, msgs []*message.Message) {
	t.Helper()
	ob, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := chaos.WriteAll(ctx, ob, db, topic, msgs, 4, 200); err != nil {
		t.Fatalf("write the backlog: %v", err)
	}
	t.Logf("backlog: %d ordered rows written in %s", len(msgs), time.Since(start).Round(time.Millisecond))
}

// sendLog is a table in the test's database where target publishers record every
// message they are asked to send, synchronously, before Publish returns: a record exists
// for each send whose Publish returned nil (the forwarder acks only then), and the
// table's identity column orders the records as the database saw them, which for two
// sends where one's Publish returned before the other's began is their real order,
// whatever the processes' clocks say.
type sendLog struct {
	e     chaos.Engine
	db    *sql.DB
	table string // quoted, qualified
}

// sendLogName is the log table's unqualified name for the outbox of prefix.
func sendLogName(prefix string) string { return prefix + "sends" }

// newSendLog creates the log table next to the outbox of opts and drops it at the end
// of the test.
func newSendLog(t testing.TB, e chaos.Engine, db *sql.DB, opts outbox.Options) *sendLog {
	t.Helper()
	l := &sendLog{e: e, db: db, table: e.Qualify(opts, sendLogName(opts.TablePrefix))}
	id := "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
	if e.Driver == "pgx" {
		id = "id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Cleanup(t, "drop the send log", func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+l.table)
		return err
	})
	_, err := db.ExecContext(ctx, "CREATE TABLE "+l.table+" ("+id+
		", uuid VARCHAR(64) NOT NULL, okey VARCHAR(64) NOT NULL, seq INT NOT NULL"+
		", sender VARCHAR(64) NOT NULL, n BIGINT NOT NULL, wall BIGINT NOT NULL)")
	if err != nil {
		t.Fatalf("create the send log: %v", err)
	}
	return l
}

// openSendLog is newSendLog in a process that did not create the table (the child).
func openSendLog(e chaos.Engine, db *sql.DB, opts outbox.Options) *sendLog {
	return &sendLog{e: e, db: db, table: e.Qualify(opts, sendLogName(opts.TablePrefix))}
}

func (l *sendLog) ph(i int) string {
	if l.e.Driver == "pgx" {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// loggingPublisher is a target publisher that records each message in a sendLog under
// sender, with the number next() returns for it, taken as Publish begins (see
// TestE2E_SigStopLaneHolder for why then).
type loggingPublisher struct {
	log    *sendLog
	sender string
	next   func() uint64
	closed atomic.Bool
}

// Publish records each message with the number of this call: a Publish call is one
// send (the forwarder checks its lease before each call), so its messages share the
// number taken when the call begins, and a call begun before a SIGSTOP is in flight,
// however many messages it carries.
func (p *loggingPublisher) Publish(_ string, msgs ...*message.Message) error {
	n := p.next()
	for _, m := range msgs {
		if p.closed.Load() {
			return fmt.Errorf("logging publisher %s closed", p.sender)
		}
		key, seq := chaos.KeySeq(m)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := p.log.db.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (uuid, okey, seq, sender, n, wall) VALUES (%s, %s, %s, %s, %s, %s)",
			p.log.table, p.log.ph(1), p.log.ph(2), p.log.ph(3), p.log.ph(4), p.log.ph(5), p.log.ph(6)),
			m.UUID, key, seq, p.sender, int64(n), time.Now().UnixNano())
		cancel()
		if err != nil {
			return fmt.Errorf("record the send: %w", err) // nacked: sent again later
		}
	}
	return nil
}

func (p *loggingPublisher) Close() error { p.closed.Store(true); return nil }

// sendRec is one record of the log.
type sendRec struct {
	ID     int64
	UUID   string
	Key    string
	Seq    int
	Sender string
	N      uint64
	Wall   time.Time
}

// records returns the whole log in identity order.
func (l *sendLog) records(t testing.TB) []sendRec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := l.db.QueryContext(ctx, "SELECT id, uuid, okey, seq, sender, n, wall FROM "+l.table+" ORDER BY id")
	if err != nil {
		t.Fatalf("read the send log: %v", err)
	}
	defer rows.Close()
	var out []sendRec
	for rows.Next() {
		var r sendRec
		var n, wall int64
		if err := rows.Scan(&r.ID, &r.UUID, &r.Key, &r.Seq, &r.Sender, &n, &wall); err != nil {
			t.Fatalf("read the send log: %v", err)
		}
		r.N, r.Wall = uint64(n), time.Unix(0, wall)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read the send log: %v", err)
	}
	return out
}

// progress returns the number of distinct messages sent, and the greatest identity.
func (l *sendLog) progress(t testing.TB) (unique int, maxID int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var m sql.NullInt64
	if err := l.db.QueryRowContext(ctx, "SELECT COUNT(DISTINCT uuid), MAX(id) FROM "+l.table).Scan(&unique, &m); err != nil {
		t.Fatalf("read the send log: %v", err)
	}
	return unique, m.Int64
}

// lanesSentBy returns the lanes (of laneCount) sender sent from.
func (l *sendLog) lanesSentBy(t testing.TB, sender string, laneCount int) map[int]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := l.db.QueryContext(ctx, "SELECT DISTINCT okey FROM "+l.table+" WHERE sender = "+l.ph(1), sender)
	if err != nil {
		t.Fatalf("read the send log: %v", err)
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatalf("read the send log: %v", err)
		}
		out[lanes.Of(k, laneCount)] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read the send log: %v", err)
	}
	return out
}

// waitUntil polls cond every 50 ms until it holds or d passes; it reports which.
func waitUntil(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replay feeds records (in log order) to a fresh chaos.Recorder, which counts
// duplicates and finds per-key order violations among first deliveries.
func replay(recs []sendRec) *chaos.Recorder {
	rec := chaos.NewRecorder()
	for _, r := range recs {
		rec.Record(r.UUID, r.Key, r.Seq)
	}
	return rec
}

// checkDupBound fails the test when more than bound messages were sent twice or more.
func checkDupBound(t testing.TB, s chaos.Summary, bound int, what string) {
	t.Helper()
	if s.Duplicates > bound {
		t.Errorf("%d duplicate sends, more than the %d that %s can explain", s.Duplicates, bound, what)
	}
}

// lanesList renders a lane set sorted.
func lanesList(m map[int]bool) string {
	var ls []int
	for l := range m {
		ls = append(ls, l)
	}
	sort.Ints(ls)
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = strconv.Itoa(l)
	}
	return "[" + strings.Join(s, " ") + "]"
}
