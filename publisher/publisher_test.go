package publisher_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/publisher"
)

var fixedNow = time.Date(2026, 11, 30, 4, 5, 6, 123456000, time.UTC)

func fixedClock() time.Time { return fixedNow }

func newMsg(uuid, payload string, md ...string) *message.Message {
	m := message.NewMessage(uuid, []byte(payload))
	for i := 0; i+1 < len(md); i += 2 {
		m.Metadata.Set(md[i], md[i+1])
	}
	return m
}

func byUUID(recs []outbox.Record) map[string]outbox.Record {
	m := make(map[string]outbox.Record, len(recs))
	for _, r := range recs {
		m[r.MessageUUID] = r
	}
	return m
}

func TestCommitPersistsBusinessRowAndMessages(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{Now: fixedClock})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.insertOrder(ctx, tx.SQLTx(), 1, "first order"); err != nil {
			t.Fatal(err)
		}
		deliverAt := fixedNow.Add(90 * time.Minute).Add(789 * time.Microsecond)
		scheduled := newMsg("u-2", "scheduled",
			publisher.MetadataOrderingKey, "customer-42",
			publisher.MetadataTransport, "amqp",
			publisher.MetadataMessageType, "OrderPlaced",
			publisher.MetadataTenantID, "tenant-a")
		publisher.SetDeliverAt(scheduled, deliverAt)
		if err := tx.Publish("orders", newMsg("u-1", "plain", "k", "v"), scheduled); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("empty", message.NewMessage("u-3", nil)); err != nil {
			t.Fatal(err)
		}
		if n := tx.Buffered(); n != 3 {
			t.Fatalf("Buffered() = %d, want 3", n)
		}
		if e.count(t, e.outbox) != 0 {
			t.Fatal("rows visible before commit")
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, e.orders); n != 1 {
			t.Fatalf("orders = %d, want 1", n)
		}
		got := byUUID(e.readAll(t))
		if len(got) != 3 {
			t.Fatalf("read %d rows, want 3: %v", len(got), got)
		}
		r1, r2, r3 := got["u-1"], got["u-2"], got["u-3"]
		if r1.Lane != outbox.Unordered || r1.OrderingKey != "" || r1.Destination != "orders" || string(r1.Body) != "plain" ||
			r1.Transport != "" || r1.MessageType != "" || r1.TenantID != "" || !r1.DeliverAt.Equal(fixedNow) || !r1.CreatedAt.Equal(fixedNow) {
			t.Errorf("u-1 = %+v", r1)
		}
		if r2.Lane != lanes.Of("customer-42", 8) || r2.OrderingKey != "customer-42" || r2.Transport != "amqp" ||
			r2.MessageType != "OrderPlaced" || r2.TenantID != "tenant-a" || !r2.DeliverAt.Equal(deliverAt) || string(r2.Body) != "scheduled" {
			t.Errorf("u-2 = %+v (want lane %d, deliver at %v)", r2, lanes.Of("customer-42", 8), deliverAt)
		}
		if r3.Destination != "empty" || len(r3.Body) != 0 {
			t.Errorf("u-3 = %+v", r3)
		}
		if r1.ID.Compare(r2.ID) >= 0 || r2.ID.Compare(r3.ID) >= 0 {
			t.Errorf("ids not in publish order: %s %s %s", r1.ID, r2.ID, r3.ID)
		}
		// Reserved keys stay in the stored headers: the forwarder republishes exactly the
		// metadata the application published.
		md, err := headercodec.DecodeMetadata(r2.Headers)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(md, scheduled.Metadata) {
			t.Errorf("u-2 headers = %v, want %v", md, scheduled.Metadata)
		}
		// Completed: everything refuses with ErrTxDone.
		if err := tx.Commit(ctx); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("second Commit: %v, want ErrTxDone", err)
		}
		if err := tx.Rollback(); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("Rollback after Commit: %v, want ErrTxDone", err)
		}
		if err := tx.Publish("orders", newMsg("late", "x")); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("Publish after Commit: %v, want ErrTxDone", err)
		}
		if err := tx.Flush(ctx); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("Flush after Commit: %v, want ErrTxDone", err)
		}
	})
}

func TestRollbackPersistsNeither(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.insertOrder(ctx, tx.SQLTx(), 1, "x"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("a", "1"), newMsg("b", "2", publisher.MetadataOrderingKey, "k")); err != nil {
			t.Fatal(err)
		}
		// A Flush before the rollback: the rows are in the transaction, and go with it.
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("c", "3")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, e.orders) + e.count(t, e.outbox); n != 0 {
			t.Fatalf("%d rows after rollback", n)
		}
		if err := tx.Rollback(); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("second Rollback: %v, want ErrTxDone", err)
		}
		if err := tx.Commit(ctx); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("Commit after Rollback: %v, want ErrTxDone", err)
		}
		if err := tx.Publish("t", newMsg("d", "4")); !errors.Is(err, outbox.ErrTxDone) {
			t.Errorf("Publish after Rollback: %v, want ErrTxDone", err)
		}
	})
}

func TestCancelledContextPersistsNeither(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ob := e.newOutbox(t, publisher.Config{})
		t.Run("commit context", func(t *testing.T) {
			tx, err := ob.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(context.Background(), tx.SQLTx(), 1, "x"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Publish("t", newMsg("a", "1")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := tx.Commit(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Commit: %v, want context.Canceled", err)
			}
		})
		t.Run("commit context without messages", func(t *testing.T) {
			tx, err := ob.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(context.Background(), tx.SQLTx(), 2, "x"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := tx.Commit(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Commit: %v, want context.Canceled", err)
			}
		})
		t.Run("begin context", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			tx, err := ob.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(ctx, tx.SQLTx(), 3, "x"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Publish("t", newMsg("b", "1")); err != nil {
				t.Fatal(err)
			}
			cancel()
			err = tx.Commit(context.Background())
			if !errors.Is(err, context.Canceled) && !errors.Is(err, outbox.ErrTxDone) {
				t.Fatalf("Commit: %v, want context.Canceled or ErrTxDone", err)
			}
			if errors.Is(err, outbox.ErrUnknownOutcome) {
				t.Fatalf("Commit: %v: a commit never sent is not of unknown outcome", err)
			}
			t.Log(err)
			if err := tx.Rollback(); !errors.Is(err, outbox.ErrTxDone) {
				t.Errorf("Rollback after failed Commit: %v, want ErrTxDone", err)
			}
		})
		t.Run("insert racing the begin context", func(t *testing.T) {
			// database/sql rolls the transaction back from a goroutine of its own when the
			// begin context ends; an insert racing it may fail with any error (seen: "sql:
			// Rows are closed"). Here the store's insert returns such an error once the
			// context has ended and the rollback has run.
			ctx, cancel := context.WithCancel(context.Background())
			racing := &racingInsertStore{Store: e.store, cancel: cancel}
			ob, err := publisher.New(racing, publisher.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := ob.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(ctx, tx.SQLTx(), 4, "x"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Publish("t", newMsg("c", "1")); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(context.Background())
			if !errors.Is(err, context.Canceled) || !errors.Is(err, outbox.ErrTxDone) || errors.Is(err, outbox.ErrUnknownOutcome) {
				t.Fatalf("Commit: %v, want context.Canceled and ErrTxDone", err)
			}
		})
		if n := e.count(t, e.orders) + e.count(t, e.outbox); n != 0 {
			t.Fatalf("%d rows after cancelled commits", n)
		}
	})
}

func TestFailingInsertRollsBackBusinessRow(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})

		t.Run("database refuses the row", func(t *testing.T) {
			// A CHECK constraint the engine enforces, provoked by a hostile destination:
			// the insert reaches the database and fails there, mid-transaction.
			if _, err := e.db.Exec("ALTER TABLE " + e.outbox + " ADD CONSTRAINT " + e.opts.TablePrefix + "no_poison CHECK (destination <> 'poison')"); err != nil {
				t.Fatal(err)
			}
			tx, err := ob.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(ctx, tx.SQLTx(), 1, "x"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Publish("fine", newMsg("a", "1")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Publish("poison", newMsg("b", "2")); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(ctx)
			if err == nil {
				t.Fatal("Commit succeeded with a row the table refuses")
			}
			if errors.Is(err, outbox.ErrUnknownOutcome) {
				t.Fatalf("a failed insert is a known outcome: %v", err)
			}
			t.Log(err)
		})
		t.Run("store refuses the record", func(t *testing.T) {
			tx, err := ob.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(ctx, tx.SQLTx(), 2, "x"); err != nil {
				t.Fatal(err)
			}
			// Not valid UTF-8: no engine's text column can hold it.
			hostile := newMsg("c", "3", publisher.MetadataTransport, "kafka\xff")
			if err := tx.Publish("t", hostile); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(ctx)
			if err == nil || errors.Is(err, outbox.ErrUnknownOutcome) {
				t.Fatalf("Commit: %v, want a failed insert", err)
			}
			t.Log(err)
		})
		if n := e.count(t, e.orders) + e.count(t, e.outbox); n != 0 {
			t.Fatalf("%d rows after failed inserts", n)
		}
	})
}

func TestTenThousandMessagesInOneTransaction(t *testing.T) {
	eachDialect(t, 64, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		const n = 10000
		payload := bytes.Repeat([]byte("p"), 200)
		err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			if err := e.insertOrder(ctx, tx.SQLTx(), 1, "bulk"); err != nil {
				return err
			}
			for i := range n {
				m := message.NewMessage(fmt.Sprintf("m-%05d", i), payload)
				if i%2 == 0 {
					m.Metadata.Set(publisher.MetadataOrderingKey, fmt.Sprintf("key-%d", i%100))
				}
				if err := tx.Publish("bulk", m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.count(t, e.outbox); got != n {
			t.Fatalf("rows = %d, want %d", got, n)
		}
		if got := len(e.readAll(t)); got != n {
			t.Fatalf("read %d rows, want %d", got, n)
		}
	})
}

func TestConcurrentPublish(t *testing.T) {
	eachDialect(t, 16, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const goroutines, each = 16, 200
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			wg.Go(func() {
				key := fmt.Sprintf("g-%d", g)
				for i := range each {
					m := newMsg(fmt.Sprintf("%d-%d", g, i), fmt.Sprintf("%06d", i), publisher.MetadataOrderingKey, key)
					if err := tx.Publish("conc", m); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		recs := e.readAll(t)
		if len(recs) != goroutines*each {
			t.Fatalf("read %d rows, want %d", len(recs), goroutines*each)
		}
		// Each goroutine's messages share a key, hence a lane, and keep their publish
		// order in id order.
		last := map[string]string{}
		for _, r := range recs {
			if r.Lane != lanes.Of(r.OrderingKey, 16) {
				t.Fatalf("row %s: lane %d, want %d", r.MessageUUID, r.Lane, lanes.Of(r.OrderingKey, 16))
			}
			if prev, ok := last[r.OrderingKey]; ok && string(r.Body) <= prev {
				t.Fatalf("key %s: %s after %s", r.OrderingKey, r.Body, prev)
			}
			last[r.OrderingKey] = string(r.Body)
		}
	})
}

func TestPublishCopiesBuffers(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		payload := []byte("original payload")
		m := message.NewMessage("copy-1", payload)
		m.Metadata.Set("h", "original")
		m.Metadata.Set(publisher.MetadataOrderingKey, "key-a")
		if err := tx.Publish("copies", m); err != nil {
			t.Fatal(err)
		}
		// The caller reuses everything right away.
		copy(payload, "CHANGED CHANGED!")
		m.Metadata.Set("h", "changed")
		m.Metadata.Set("added", "later")
		m.Metadata.Set(publisher.MetadataOrderingKey, "key-b")
		m.UUID = "copy-2"
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		recs := e.readAll(t)
		if len(recs) != 1 {
			t.Fatalf("read %d rows, want 1", len(recs))
		}
		r := recs[0]
		md, err := headercodec.DecodeMetadata(r.Headers)
		if err != nil {
			t.Fatal(err)
		}
		want := message.Metadata{"h": "original", publisher.MetadataOrderingKey: "key-a"}
		if string(r.Body) != "original payload" || !maps.Equal(md, want) || r.MessageUUID != "copy-1" || r.OrderingKey != "key-a" {
			t.Fatalf("row changed by the caller's later writes: uuid %q key %q body %q headers %v", r.MessageUUID, r.OrderingKey, r.Body, md)
		}
	})
}

func TestMetadataRoundTrip(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		big := message.Metadata{}
		for i := range 40 { // more entries than the encoder sorts on the stack
			big[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", i)
		}
		cases := map[string]message.Metadata{
			"nil":                  nil,
			"empty":                {},
			"empty value and name": {"": "", "empty": ""},
			"unicode":              {"ключ": "значение", "emoji": "🙂", "nul": "a\x00b", "bytes": "\xff\xfe\x00\x01"},
			"reserved":             {publisher.MetadataOrderingKey: "k", publisher.MetadataTransport: "kafka", publisher.MetadataMessageType: "T", publisher.MetadataTenantID: "x", publisher.MetadataDeliverAt: "2026-01-02T03:04:05.123456789Z", "other": "1"},
			"big":                  big,
			"long":                 {"long": strings.Repeat("ü", 70000)},
		}
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for name, md := range cases {
			m := message.NewMessage(name, []byte(name))
			m.Metadata = md
			if err := tx.Publish("md", m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got := byUUID(e.readAll(t))
		for name, md := range cases {
			r, ok := got[name]
			if !ok {
				t.Errorf("%s: row missing", name)
				continue
			}
			back, err := headercodec.DecodeMetadata(r.Headers)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if !maps.Equal(back, md) || (md == nil && len(back) != 0) {
				t.Errorf("%s: metadata %q came back as %q", name, md, back)
			}
			if want := headercodec.EncodeMetadata(nil, md); !bytes.Equal(r.Headers, want) {
				t.Errorf("%s: stored headers differ from headercodec.EncodeMetadata", name)
			}
		}
	})
}

func TestOrderingKeyLane(t *testing.T) {
	const lanesN = 7
	eachDialect(t, lanesN, func(t *testing.T, e *env) {
		ctx := context.Background()
		// A Config function instead of metadata: the key comes from the topic and payload.
		ob := e.newOutbox(t, publisher.Config{OrderingKey: func(topic string, msg *message.Message) (string, error) {
			if string(msg.Payload) == "" {
				return "", nil
			}
			return topic + "/" + string(msg.Payload), nil
		}})
		keys := []string{"", "a", "b", "customer-1", "customer-2", "ключ", "🙂", strings.Repeat("z", 1000)}
		err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			for i, k := range keys {
				if err := tx.Publish("lanes", message.NewMessage(fmt.Sprint(i), []byte(k))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := byUUID(e.readAll(t))
		for i, k := range keys {
			r := got[fmt.Sprint(i)]
			wantKey, wantLane := "", outbox.Unordered
			if k != "" {
				wantKey = "lanes/" + k
				wantLane = lanes.Of(wantKey, lanesN)
			}
			if r.OrderingKey != wantKey || r.Lane != wantLane {
				t.Errorf("key %q: stored key %q lane %d, want lane %d", wantKey, r.OrderingKey, r.Lane, wantLane)
			}
		}
	})
}

func TestPublishRefusesWholeCall(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		bad := newMsg("bad-uuid", "x", publisher.MetadataDeliverAt, "tomorrow")
		err = tx.Publish("t", newMsg("ok", "1"), bad)
		if err == nil || !strings.Contains(err.Error(), "bad-uuid") || !strings.Contains(err.Error(), publisher.MetadataDeliverAt) {
			t.Fatalf("Publish: %v, want an error naming the message and %s", err, publisher.MetadataDeliverAt)
		}
		if err := tx.Publish("t", newMsg("ok", "1"), nil); err == nil {
			t.Fatal("nil message accepted")
		}
		if err := tx.Publish("", newMsg("ok", "1")); err == nil {
			t.Fatal("empty topic accepted")
		}
		failing := e.newOutbox(t, publisher.Config{TenantID: func(string, *message.Message) (string, error) {
			return "", errors.New("no tenant in context")
		}})
		tx2, err := failing.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback()
		if err := tx2.Publish("t", newMsg("x", "1")); err == nil || !strings.Contains(err.Error(), "TenantID: no tenant in context") {
			t.Fatalf("Publish: %v, want the TenantID error", err)
		}
		if tx.Buffered() != 0 || tx2.Buffered() != 0 {
			t.Fatalf("refused calls buffered %d and %d messages", tx.Buffered(), tx2.Buffered())
		}
	})
}

func TestCloseStopsPublishButCommitWrites(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("before", "1")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("after", "2")); !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("Publish after Close: %v, want ErrClosed", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if recs := e.readAll(t); len(recs) != 1 || recs[0].MessageUUID != "before" {
			t.Fatalf("rows %v, want only %q", recs, "before")
		}
	})
}

func TestApplicationCommittedDirectly(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.insertOrder(ctx, tx.SQLTx(), 1, "x"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("a", "1"), newMsg("b", "2")); err != nil {
			t.Fatal(err)
		}
		if err := tx.SQLTx().Commit(); err != nil { // the mistake
			t.Fatal(err)
		}
		err = tx.Commit(ctx)
		if !errors.Is(err, outbox.ErrTxDone) || !strings.Contains(err.Error(), "2 buffered messages were NOT written") {
			t.Fatalf("Commit: %v, want ErrTxDone reporting 2 messages not written", err)
		}
		if e.count(t, e.orders) != 1 || e.count(t, e.outbox) != 0 {
			t.Fatal("unexpected rows")
		}

		tx, err = ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.SQLTx().Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); !errors.Is(err, outbox.ErrTxDone) {
			t.Fatalf("Rollback of a directly completed tx: %v, want ErrTxDone", err)
		}
	})
}

// Flush, then the application commits SQLTx() itself, then Commit: the flushed messages
// were committed with the application's commit, and Commit's error must not say they
// were lost; only messages still buffered are reported as not written.
func TestCommitAfterFlushAndApplicationCommit(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("a", "1"), newMsg("b", "2")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.SQLTx().Commit(); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(ctx)
		if !errors.Is(err, outbox.ErrTxDone) || strings.Contains(err.Error(), "NOT written") || !strings.Contains(err.Error(), "2 messages Flush wrote") {
			t.Fatalf("Commit after Flush and the application's commit: %v; want ErrTxDone saying the 2 flushed messages went with the application's commit", err)
		}
		if n := e.count(t, e.outbox); n != 2 {
			t.Fatalf("%d outbox rows, want the 2 flushed ones", n)
		}

		// Flushed and buffered: only the buffered ones are not written.
		tx, err = ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("c", "3")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("d", "4"), newMsg("e", "5")); err != nil {
			t.Fatal(err)
		}
		if err := tx.SQLTx().Commit(); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(ctx)
		if !errors.Is(err, outbox.ErrTxDone) || !strings.Contains(err.Error(), "2 buffered messages were NOT written") || !strings.Contains(err.Error(), "1 messages Flush wrote") {
			t.Fatalf("Commit with flushed and buffered messages: %v", err)
		}
		if n := e.count(t, e.outbox); n != 3 {
			t.Fatalf("%d outbox rows, want 3", n)
		}
	})
}

// recorder is a Notifier that keeps what it is told.
type recorder struct {
	opts  outbox.Options
	mu    sync.Mutex
	got   []outbox.Commit
	sleep time.Duration
	panic bool
}

func (r *recorder) NotifierOptions() outbox.Options { return r.opts }
func (r *recorder) Notify(c outbox.Commit) {
	if r.sleep > 0 {
		time.Sleep(r.sleep)
	}
	r.mu.Lock()
	r.got = append(r.got, c)
	r.mu.Unlock()
	if r.panic {
		panic("notifier is broken")
	}
}
func (r *recorder) commits() []outbox.Commit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func TestNotifier(t *testing.T) {
	eachDialect(t, 128, func(t *testing.T, e *env) {
		ctx := context.Background()
		t.Run("told what was committed", func(t *testing.T) {
			rec := &recorder{opts: e.opts}
			ob := e.newOutbox(t, publisher.Config{Notifier: rec})
			keys := []string{"a", "b", "c", "a", "customer-77", "z"}
			want := map[int]bool{}
			err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
				for i, k := range keys {
					want[lanes.Of(k, 128)] = true
					if err := tx.Publish("n", newMsg(fmt.Sprint(i), "", publisher.MetadataOrderingKey, k)); err != nil {
						return err
					}
				}
				if err := tx.Flush(ctx); err != nil { // flushed rows count too
					return err
				}
				return tx.Publish("n", newMsg("u1", ""), newMsg("u2", ""))
			})
			if err != nil {
				t.Fatal(err)
			}
			wantLanes := slices.Sorted(maps.Keys(want))
			got := rec.commits()
			if len(got) != 1 || !slices.Equal(got[0].Lanes, wantLanes) || got[0].Unordered != 2 {
				t.Fatalf("notified %+v, want one commit with lanes %v and 2 unordered", got, wantLanes)
			}
			// Rollback, failed commit and an empty commit notify nothing.
			_ = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
				_ = tx.Publish("n", newMsg("x", ""))
				return errors.New("no")
			})
			if err := ob.WithTx(ctx, func(context.Context, *publisher.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if got := rec.commits(); len(got) != 1 {
				t.Fatalf("notified %d times, want 1", len(got))
			}
		})
		t.Run("mismatch refused at New", func(t *testing.T) {
			for _, other := range []outbox.Options{
				{TablePrefix: e.opts.TablePrefix, Lanes: 64},
				{TablePrefix: "other_", Lanes: 128},
				{Schema: "elsewhere", TablePrefix: e.opts.TablePrefix, Lanes: 128},
			} {
				_, err := publisher.New(e.store, publisher.Config{Notifier: &recorder{opts: other}}, nil)
				if !errors.Is(err, outbox.ErrNotifierMismatch) {
					t.Errorf("notifier for %+v: %v, want ErrNotifierMismatch", other, err)
				}
			}
			// Equal after defaults is the same table.
			same := e.opts
			if same.Lanes == outbox.LanesDefault {
				same.Lanes = 0
			}
			if _, err := publisher.New(e.store, publisher.Config{Notifier: &recorder{opts: same}}, nil); err != nil {
				t.Errorf("same table refused: %v", err)
			}
		})
		t.Run("Notifiers: every one told, after Notifier; a panicking one does not stop the next", func(t *testing.T) {
			first, broken, last := &recorder{opts: e.opts}, &recorder{opts: e.opts, panic: true}, &recorder{opts: e.opts}
			ob := e.newOutbox(t, publisher.Config{Notifier: first, Notifiers: []outbox.Notifier{broken, last}})
			err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
				return tx.Publish("n", newMsg("fan-out", ""))
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range []*recorder{first, broken, last} {
				if got := r.commits(); len(got) != 1 || got[0].Unordered != 1 {
					t.Errorf("notifier %d told %+v, want one commit of 1 unordered row", i, got)
				}
			}
			if _, err := publisher.New(e.store, publisher.Config{Notifiers: []outbox.Notifier{first, nil}}, nil); !errors.Is(err, outbox.ErrInvalidOptions) {
				t.Errorf("nil in Notifiers: %v, want ErrInvalidOptions", err)
			}
			other := &recorder{opts: outbox.Options{TablePrefix: "other_", Lanes: 128}}
			if _, err := publisher.New(e.store, publisher.Config{Notifiers: []outbox.Notifier{first, other}}, nil); !errors.Is(err, outbox.ErrNotifierMismatch) {
				t.Errorf("mismatch in Notifiers: %v, want ErrNotifierMismatch", err)
			}
		})
		t.Run("slow or panicking notifier never fails a commit", func(t *testing.T) {
			for _, rec := range []*recorder{{opts: e.opts, sleep: 50 * time.Millisecond}, {opts: e.opts, panic: true}} {
				ob := e.newOutbox(t, publisher.Config{Notifier: rec})
				id := 100 + len(rec.commits())
				if rec.panic {
					id++
				}
				err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
					if err := e.insertOrder(ctx, tx.SQLTx(), id, "n"); err != nil {
						return err
					}
					return tx.Publish("n", newMsg(fmt.Sprint("slow-", id), ""))
				})
				if err != nil {
					t.Fatalf("commit failed because of the notifier: %v", err)
				}
				if len(rec.commits()) != 1 {
					t.Fatal("notifier not called")
				}
			}
		})
	})
}

func TestWithTx(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			if err := e.insertOrder(ctx, tx.SQLTx(), 1, "ok"); err != nil {
				return err
			}
			// Code further down finds the transaction in the context.
			pub, ok := publisher.PublisherFromContext(ctx)
			if !ok || pub != tx {
				t.Error("PublisherFromContext does not return the Tx")
			}
			if sqlTx, ok := publisher.SQLTxFromContext(ctx); !ok || sqlTx != tx.SQLTx() {
				t.Error("SQLTxFromContext does not return the *sql.Tx")
			}
			return pub.Publish("t", newMsg("committed", ""))
		})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			if err := e.insertOrder(ctx, tx.SQLTx(), 2, "error"); err != nil {
				return err
			}
			_ = tx.Publish("t", newMsg("rolled back", ""))
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("WithTx: %v, want fn's error", err)
		}
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Errorf("recovered %v, want the re-raised panic", r)
				}
			}()
			_ = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
				if err := e.insertOrder(ctx, tx.SQLTx(), 3, "panic"); err != nil {
					return err
				}
				_ = tx.Publish("t", newMsg("panicked", ""))
				panic("kaboom")
			})
		}()
		if e.count(t, e.orders) != 1 {
			t.Fatalf("orders = %d, want only the committed one", e.count(t, e.orders))
		}
		if recs := e.readAll(t); len(recs) != 1 || recs[0].MessageUUID != "committed" {
			t.Fatalf("rows %v, want only %q", recs, "committed")
		}
		if _, ok := publisher.TxFromContext(ctx); ok {
			t.Fatal("TxFromContext found a Tx in a bare context")
		}
	})
}

func TestBeginConnLeavesConnectionOpen(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		conn, err := e.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for i := range 2 {
			tx, err := ob.BeginConn(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.insertOrder(ctx, tx.SQLTx(), i, "conn"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Publish("t", newMsg(fmt.Sprint(i), "")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := conn.PingContext(ctx); err != nil {
				t.Fatalf("caller's connection unusable after Commit: %v", err)
			}
		}
		if e.count(t, e.orders) != 2 || e.count(t, e.outbox) != 2 {
			t.Fatal("missing rows")
		}
	})
}

func TestAttachFlush(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		rec := &recorder{opts: e.opts}
		ob := e.newOutbox(t, publisher.Config{Notifier: rec})

		// The application (an ORM) owns a plain *sql.Tx and commits it itself.
		sqlTx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		otx := ob.Attach(sqlTx)
		if err := e.insertOrder(ctx, sqlTx, 1, "orm"); err != nil {
			t.Fatal(err)
		}
		if err := otx.Publish("orm", newMsg("a", "1", publisher.MetadataOrderingKey, "k")); err != nil {
			t.Fatal(err)
		}
		if err := otx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := otx.Publish("orm", newMsg("b", "2")); err != nil {
			t.Fatal(err)
		}
		if err := otx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sqlTx.Commit(); err != nil {
			t.Fatal(err)
		}
		otx.NotifyCommitted()
		if e.count(t, e.orders) != 1 || e.count(t, e.outbox) != 2 {
			t.Fatal("rows missing after the application's commit")
		}
		if got := rec.commits(); len(got) != 1 || len(got[0].Lanes) != 1 || got[0].Lanes[0] != lanes.Of("k", 8) || got[0].Unordered != 1 {
			t.Fatalf("notified %+v", got)
		}
		// Publishing after the application committed: Flush reports the loss.
		if err := otx.Publish("orm", newMsg("c", "3")); err != nil {
			t.Fatal(err)
		}
		if err := otx.Flush(ctx); !errors.Is(err, outbox.ErrTxDone) || !strings.Contains(err.Error(), "1 buffered messages were NOT written") {
			t.Fatalf("Flush after the application's commit: %v", err)
		}

		// The application rolls back: flushed rows go with it.
		sqlTx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		otx = ob.Attach(sqlTx)
		if err := e.insertOrder(ctx, sqlTx, 2, "orm"); err != nil {
			t.Fatal(err)
		}
		if err := otx.Publish("orm", newMsg("d", "4")); err != nil {
			t.Fatal(err)
		}
		if err := otx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sqlTx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if e.count(t, e.orders) != 1 || e.count(t, e.outbox) != 2 {
			t.Fatal("rolled back rows visible")
		}
	})
}

func TestUnknownCommitOutcome(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.insertOrder(ctx, tx.SQLTx(), 1, "lost"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish("t", newMsg("a", "1")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Flush(ctx); err != nil { // the rows are in the transaction
			t.Fatal(err)
		}
		// The connection dies right before COMMIT (killed from another session, as a
		// network partition or a server failover would).
		id := e.sessionID(t, tx.SQLTx())
		q, args := e.d.kill(id)
		if _, err := e.db.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // let the server close the socket
		err = tx.Commit(ctx)
		if !errors.Is(err, outbox.ErrUnknownOutcome) {
			t.Fatalf("Commit on a killed connection: %v, want ErrUnknownOutcome", err)
		}
		t.Logf("Commit: %v", err)
		// Here the server rolled back (it killed the session before COMMIT arrived); the
		// client cannot know that, hence "unknown".
		if n := e.count(t, e.orders) + e.count(t, e.outbox); n != 0 {
			t.Fatalf("%d rows", n)
		}
		if err := tx.Commit(ctx); !errors.Is(err, outbox.ErrTxDone) {
			t.Fatalf("Commit after an unknown outcome: %v, want ErrTxDone", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		_, err := publisher.New(e.store, publisher.Config{TxOptions: &sql.TxOptions{ReadOnly: true}}, nil)
		if !errors.Is(err, outbox.ErrInvalidOptions) || !strings.Contains(err.Error(), "TxOptions.ReadOnly") {
			t.Fatalf("New with a read-only TxOptions: %v, want an error naming TxOptions.ReadOnly", err)
		}
		if _, err := publisher.New(nil, publisher.Config{}, nil); err == nil {
			t.Fatal("nil store accepted")
		}
		// An isolation level is passed through to the transaction.
		ob := e.newOutbox(t, publisher.Config{TxOptions: &sql.TxOptions{Isolation: sql.LevelSerializable}})
		if err := ob.WithTx(context.Background(), func(ctx context.Context, tx *publisher.Tx) error {
			return tx.Publish("t", newMsg("s", ""))
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPublishRacingCommit: publishers keep going while Commit runs. Every Publish that
// returned nil is in the table, every other one failed with ErrTxDone: nothing is
// silently dropped between the last insert and the COMMIT.
func TestPublishRacingCommit(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := context.Background()
		ob := e.newOutbox(t, publisher.Config{})
		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		accepted := map[string]bool{}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					uuid := fmt.Sprintf("%d-%d", g, i)
					err := tx.Publish("race", newMsg(uuid, "x"))
					if err != nil {
						if !errors.Is(err, outbox.ErrTxDone) {
							t.Errorf("Publish: %v, want ErrTxDone", err)
						}
						return
					}
					mu.Lock()
					accepted[uuid] = true
					mu.Unlock()
					if i%50 == 49 {
						// Flushes in between: written rows and the remaining buffer both count.
						if err := tx.Flush(ctx); err != nil && !errors.Is(err, outbox.ErrTxDone) {
							t.Errorf("Flush: %v", err)
						}
					}
				}
			})
		}
		time.Sleep(30 * time.Millisecond)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		recs := e.readAll(t)
		if len(recs) != len(accepted) {
			t.Fatalf("%d rows, %d accepted publishes", len(recs), len(accepted))
		}
		for _, r := range recs {
			if !accepted[r.MessageUUID] {
				t.Fatalf("row %s was never accepted", r.MessageUUID)
			}
		}
		t.Logf("%d messages accepted before the commit", len(accepted))
	})
}

// racingInsertStore cancels the transaction's begin context in Insert, waits for
// database/sql to roll the transaction back, and fails as an insert racing that rollback
// may.
type racingInsertStore struct {
	outbox.Store
	cancel context.CancelFunc
}

func (s *racingInsertStore) Insert(ctx context.Context, tx *sql.Tx, recs []outbox.Record) error {
	s.cancel()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := tx.ExecContext(context.Background(), "SELECT 1"); errors.Is(err, sql.ErrTxDone) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("sql: Rows are closed")
}
