package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/dsn"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// Metadata this demo adds to its messages (the outbox_* keys are the library's).
const (
	metaRun = "quickstart_run" // tells this run's messages from earlier runs' on a durable broker
	metaSeq = "customer_seq"   // the customer's n-th committed order
)

// OrderPlaced is the event payload.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// run is the whole demo; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "quickstart:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	out := &printer{w: stdout}
	failed := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "quickstart: "+format+"\n", a...)
		out.printf("FAIL\n")
		return 1
	}

	level := slog.LevelWarn
	if s.verbose {
		level = slog.LevelDebug
	}
	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))

	runID := newRunID()
	topic := "quickstart.orders"
	out.printf("watermill-outbox quickstart (run %s)\n", runID)

	db, store, dialect, err := openDatabase(ctx, s)
	if err != nil {
		return failed("%v", err)
	}
	defer db.Close()
	opts := store.Options()
	out.printf("  database  %s %s: outbox table %s (%d lanes), business table %sorders\n",
		s.db, dsn.Redact(s.dsn), opts.OutboxTable(), opts.Lanes, s.prefix)

	b, err := openBroker(s, topic, logger)
	if err != nil {
		return failed("%v", err)
	}
	defer b.close()
	out.printf("  broker    %s\n", b.name)

	// The forwarder claims committed outbox rows and republishes them to the broker. It is
	// also the publisher's Notifier: a commit wakes it at once instead of at its next poll.
	fwd, err := forwarder.New(store, forwarder.Targets{"": b.pub}, forwarder.Config{
		HandlerName:     "outbox_forwarder",
		ShutdownTimeout: 5 * time.Second,
	}, logger)
	if err != nil {
		return failed("forwarder: %v", err)
	}
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	if err != nil {
		return failed("publisher: %v", err)
	}

	tr := newTracker(runID, out, b.partition)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return failed("router: %v", err)
	}
	router.AddMiddleware(middleware.Recoverer)
	if _, err := fwd.AddToRouter(router); err != nil {
		return failed("%v", err)
	}
	router.AddConsumerHandler("print_orders", topic, b.sub, tr.handle)

	routerCtx, stopRouter := context.WithCancel(context.Background())
	defer stopRouter()
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(routerCtx) }()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return failed("router stopped before it ran: %v", err)
	case <-ctx.Done():
		return failed("router did not start within -timeout %s", s.timeout)
	}
	out.printf("  router    running: handler %q (outbox -> broker), handler %q (broker -> this output)\n\n",
		"outbox_forwarder", "print_orders")

	out.printf("placing orders, one transaction each: the order row + an OrderPlaced message keyed by customer\n")
	if err := placeOrders(ctx, ob, db, dialect, topic, runID, s.delay, tr); err != nil {
		stopRouter()
		<-routerDone
		return failed("%v", err)
	}

	// Wait for every committed message (the scheduled one comes last, a few seconds on).
	select {
	case <-tr.allIn:
	case err := <-routerDone:
		return failed("router stopped: %v", err)
	case <-ctx.Done():
		stopRouter()
		<-routerDone
		tr.printSummary(nil)
		return failed("timed out after %s waiting for %s", s.timeout, strings.Join(tr.missing(), ", "))
	}

	// Shut down the way a service does: the router closes its handlers, the forwarder
	// finishes what is in flight, gives back its lane leases and leaves.
	stopRouter()
	select {
	case err := <-routerDone:
		if err != nil {
			fmt.Fprintln(stderr, "quickstart: router:", err)
		}
	case <-time.After(20 * time.Second):
		fmt.Fprintln(stderr, "quickstart: router did not close within 20s")
	}

	rows, err := tr.checkRows(context.Background(), db, dialect)
	if err != nil {
		return failed("check the orders table: %s", dsn.Scrub(err.Error(), s.dsn))
	}
	if problems := tr.printSummary(rows); len(problems) > 0 {
		return failed("%s", strings.Join(problems, "; "))
	}
	out.printf("OK\n")
	dsnArg := "'" + s.dsn + "'"
	if dsn.Password(s.dsn) != "" {
		dsnArg = "'...'" // never print a password
	}
	out.printf("\nnext: look at the outbox table with\n  go run ./cmd/outboxctl stats -dialect %s -dsn %s -prefix %s\n", s.db, dsnArg, s.prefix)
	return 0
}

func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// placeOrders places ten orders for three customers, one transaction each. The fifth
// (bob's second) is rolled back; the last one also schedules a PaymentReminder.
func placeOrders(ctx context.Context, ob *publisher.Outbox, db *sql.DB, d dialect, topic, runID string,
	delay time.Duration, tr *tracker) error {
	customers := []string{"alice", "bob", "carol"}
	seq := map[string]int{}
	for i := range 10 {
		customer := customers[i%len(customers)]
		order := OrderPlaced{
			OrderID:     fmt.Sprintf("%s-%02d", runID, i+1),
			Customer:    customer,
			AmountCents: int64(1000 + 250*i),
		}
		rollback := i == 4
		scheduled := i == 9

		tx, err := ob.Begin(ctx)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		// 1. the business write, in the transaction
		if _, err := tx.SQLTx().ExecContext(ctx, d.insertOrder, order.OrderID, order.Customer, order.AmountCents); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("insert order %s: %w", order.OrderID, err)
		}
		// 2. the event, in the same transaction: buffered now, written at Commit
		payload, _ := json.Marshal(order)
		msg := message.NewMessage(watermill.NewUUID(), payload)
		msg.Metadata.Set(publisher.MetadataOrderingKey, customer) // per-customer order
		msg.Metadata.Set(publisher.MetadataMessageType, "OrderPlaced")
		msg.Metadata.Set(metaRun, runID)
		msg.Metadata.Set(metaSeq, strconv.Itoa(seq[customer]+1))
		if err := tx.Publish(topic, msg); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("publish: %w", err)
		}
		sentMsgs := []*sentMsg{{uuid: msg.UUID, kind: "OrderPlaced", key: customer, order: order.OrderID, seq: seq[customer] + 1}}

		var reminder *sentMsg
		if scheduled {
			// A message without an ordering key, not to be sent before its time.
			due := time.Now().Add(delay)
			r := message.NewMessage(watermill.NewUUID(), payload)
			r.Metadata.Set(publisher.MetadataMessageType, "PaymentReminder")
			r.Metadata.Set(metaRun, runID)
			publisher.SetDeliverAt(r, due)
			if err := tx.Publish(topic, r); err != nil {
				_ = tx.Rollback()
				return fmt.Errorf("publish: %w", err)
			}
			reminder = &sentMsg{uuid: r.UUID, kind: "PaymentReminder", order: order.OrderID, due: due}
			sentMsgs = append(sentMsgs, reminder)
		}

		tr.register(sentMsgs)
		amount := fmt.Sprintf("$%d.%02d", order.AmountCents/100, order.AmountCents%100)
		if rollback {
			// The payment failed: the application rolls back. The order row and the
			// buffered message go with it; nothing reaches the outbox table.
			if err := tx.Rollback(); err != nil {
				return fmt.Errorf("rollback: %w", err)
			}
			tr.settle(sentMsgs, false, time.Now())
			tr.out.printf("  rollback  order %s  %-5s %-6s %s  (card declined: order row and message discarded)\n",
				order.OrderID, customer, "", amount)
			continue
		}
		start := time.Now()
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit order %s: %w", order.OrderID, err)
		}
		seq[customer]++
		tr.settle(sentMsgs, true, start)
		line := fmt.Sprintf("  commit    order %s  %-5s %-6s %s", order.OrderID, customer, fmt.Sprintf("seq %d", seq[customer]), amount)
		if reminder != nil {
			line += fmt.Sprintf("  + PaymentReminder due %s (in %s)", reminder.due.Format("15:04:05.000"), delay)
		}
		tr.out.printf("%s\n", line)
		// A short pause so that the output reads as a flow; the forwarder does not need it.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tr.placingDone()
	return nil
}

// printer serialises output lines from the placing loop and the consumer handler.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, a...)
}

type sentMsg struct {
	uuid, kind, key, order string
	seq                    int
	due                    time.Time // zero = at once

	state     int       // 0 pending commit, 1 committed, 2 rolled back
	commitAt  time.Time // when Commit was called
	arrivedAt time.Time // first arrival; zero = not (yet) received
}

// tracker is the consumer's side: it records what arrives and checks it against what
// was committed.
type tracker struct {
	runID     string
	out       *printer
	partition func(*message.Message) string

	mu         sync.Mutex
	msgs       map[string]*sentMsg
	order      []*sentMsg
	perKey     map[string][]int // seqs in arrival order (first arrivals)
	dups       int
	foreign    int
	unexpected []string
	done       bool
	allIn      chan struct{}
	closed     bool
}

func newTracker(runID string, out *printer, partition func(*message.Message) string) *tracker {
	return &tracker{runID: runID, out: out, partition: partition, msgs: map[string]*sentMsg{},
		perKey: map[string][]int{}, allIn: make(chan struct{})}
}

func (t *tracker) register(ms []*sentMsg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range ms {
		t.msgs[m.uuid] = m
		t.order = append(t.order, m)
	}
}

func (t *tracker) settle(ms []*sentMsg, committed bool, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range ms {
		if committed {
			m.state = 1
		} else {
			m.state = 2
		}
		m.commitAt = at
	}
	t.checkLocked()
}

func (t *tracker) placingDone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	t.checkLocked()
}

func (t *tracker) checkLocked() {
	if !t.done || t.closed {
		return
	}
	for _, m := range t.order {
		if m.state == 1 && m.arrivedAt.IsZero() {
			return
		}
	}
	t.closed = true
	close(t.allIn)
}

// handle is the consumer: a Watermill handler like any other.
func (t *tracker) handle(msg *message.Message) error {
	now := time.Now()
	if run := msg.Metadata.Get(metaRun); run != t.runID {
		t.mu.Lock()
		t.foreign++
		t.mu.Unlock()
		t.out.printf("  received  a message of an earlier run (%q), ignored\n", run)
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.msgs[msg.UUID]
	if !ok || m.state == 2 {
		t.unexpected = append(t.unexpected, msg.UUID)
		t.out.printf("  received  UNEXPECTED message %s\n", msg.UUID)
		return nil
	}
	where := t.partition(msg)
	if where != "" {
		where = "  " + where
	}
	if !m.arrivedAt.IsZero() {
		// At-least-once: a redelivery (after a crash between send and delete) is normal,
		// and consumers dedupe by message UUID, as here.
		t.dups++
		t.out.printf("  received  duplicate of %s %s (deduplicated by UUID)\n", m.kind, m.order)
		return nil
	}
	m.arrivedAt = now
	if m.key != "" {
		t.perKey[m.key] = append(t.perKey[m.key], m.seq)
	}
	key := msg.Metadata.Get(publisher.MetadataOrderingKey)
	switch {
	case !m.due.IsZero():
		t.out.printf("  received  %-15s (no key)        order %s%s  due %s, arrived %s after it\n",
			m.kind, m.order, where, m.due.Format("15:04:05.000"), now.Sub(m.due).Round(time.Millisecond))
	default:
		lat := ""
		if !m.commitAt.IsZero() {
			lat = fmt.Sprintf("  %s after Commit", now.Sub(m.commitAt).Round(time.Millisecond))
		}
		t.out.printf("  received  %-15s key=%-5s seq=%s  order %s%s%s\n",
			m.kind, key, msg.Metadata.Get(metaSeq), m.order, where, lat)
	}
	t.checkLocked()
	return nil
}

// missing names the committed messages that did not arrive.
func (t *tracker) missing() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, m := range t.order {
		if m.state == 1 && m.arrivedAt.IsZero() {
			out = append(out, m.kind+" "+m.order)
		}
	}
	if len(out) == 0 {
		out = append(out, "nothing (placing orders did not finish)")
	}
	return out
}

// rowCheck is what the orders table holds after the run.
type rowCheck struct {
	committedRows  int // committed orders found
	committedWant  int
	rolledBackRows int // rolled-back orders found (must be 0)
}

func (t *tracker) checkRows(ctx context.Context, db *sql.DB, d dialect) (*rowCheck, error) {
	t.mu.Lock()
	orders := map[string]int{}
	for _, m := range t.order {
		if m.kind == "OrderPlaced" {
			orders[m.order] = m.state
		}
	}
	t.mu.Unlock()
	rc := &rowCheck{}
	for id, state := range orders {
		var n int
		if err := db.QueryRowContext(ctx, d.countOrder, id).Scan(&n); err != nil {
			return nil, err
		}
		switch state {
		case 1:
			rc.committedWant++
			rc.committedRows += n
		case 2:
			rc.rolledBackRows += n
		}
	}
	return rc, nil
}

// printSummary prints the summary and returns what is wrong (nothing when all is well).
// rows is nil when the run did not get that far.
func (t *tracker) printSummary(rows *rowCheck) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var problems []string
	var sent, received, rolledBack, rolledBackSeen, txs int
	commits := map[time.Time]bool{}
	var scheduled *sentMsg
	for _, m := range t.order {
		switch m.state {
		case 1:
			sent++
			commits[m.commitAt] = true
			if !m.arrivedAt.IsZero() {
				received++
			}
		case 2:
			rolledBack++
		}
		if !m.due.IsZero() {
			scheduled = m
		}
	}
	txs = len(commits)
	rolledBackSeen = len(t.unexpected)

	out := t.out
	out.printf("\nsummary\n")
	out.printf("  sent (committed)               %d messages in %d transactions\n", sent, txs)
	if received != sent {
		problems = append(problems, fmt.Sprintf("received %d of %d committed messages", received, sent))
	}
	out.printf("  received                       %d of %d (%d duplicates, %d from earlier runs ignored)\n",
		received, sent, t.dups, t.foreign)

	rb := fmt.Sprintf("%d: its message never arrived", rolledBack)
	if rows != nil {
		rb += fmt.Sprintf(", no order row (%d found)", rows.rolledBackRows)
		if rows.rolledBackRows != 0 {
			problems = append(problems, "a rolled-back order row exists")
		}
		if rows.committedRows != rows.committedWant {
			problems = append(problems, fmt.Sprintf("%d of %d committed order rows found", rows.committedRows, rows.committedWant))
		}
	}
	if rolledBackSeen > 0 {
		rb = fmt.Sprintf("%d, but %d unexpected messages arrived", rolledBack, rolledBackSeen)
		problems = append(problems, "unexpected messages arrived (rolled back or unknown)")
	}
	out.printf("  rolled back, not sent          %s\n", rb)

	keys := make([]string, 0, len(t.perKey))
	for k := range t.perKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	orderOK := true
	var perKey []string
	for _, k := range keys {
		seqs := t.perKey[k]
		parts := make([]string, len(seqs))
		for i, s := range seqs {
			parts[i] = strconv.Itoa(s)
			if s != i+1 {
				orderOK = false
			}
		}
		perKey = append(perKey, k+" "+strings.Join(parts, ","))
	}
	verdict := "yes"
	if !orderOK {
		verdict = "NO"
		problems = append(problems, "per-key order broken")
	}
	out.printf("  per-key order held             %s (%s)\n", verdict, strings.Join(perKey, "; "))

	switch {
	case scheduled == nil:
		out.printf("  scheduled delivered after due  (not scheduled)\n")
	case scheduled.arrivedAt.IsZero():
		out.printf("  scheduled delivered after due  NO: not received\n")
		problems = append(problems, "scheduled message not received")
	case scheduled.arrivedAt.Before(scheduled.due):
		out.printf("  scheduled delivered after due  NO: arrived %s early\n", scheduled.due.Sub(scheduled.arrivedAt))
		problems = append(problems, "scheduled message arrived before its time")
	default:
		out.printf("  scheduled delivered after due  yes (due %s, arrived %s later)\n",
			scheduled.due.Format("15:04:05.000"), scheduled.arrivedAt.Sub(scheduled.due).Round(time.Millisecond))
	}
	return problems
}
