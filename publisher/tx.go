package publisher

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// Tx is an outbox bound to one database transaction. It is a message.Publisher: Publish
// buffers messages in memory and Commit (or Flush) writes them into the transaction in
// bulk, so the messages exist if and only if the business writes made through SQLTx
// commit.
//
// Publish, Close and Buffered are safe for concurrent use, also while Flush or Commit
// runs (a Publish that loses the race with Commit fails with outbox.ErrTxDone; it is
// never silently dropped). Flush, Commit and Rollback serialise with each other.
type Tx struct {
	ob       *Outbox
	tx       *sql.Tx
	txCtx    context.Context // the ctx the transaction was begun with; nil when attached
	attached bool

	op sync.Mutex // serialises Flush, Commit, Rollback, NotifyCommitted

	mu      sync.Mutex
	closed  bool // Close was called: Publish refused, the buffer is still written
	done    bool // Commit or Rollback started, or a write failed
	records []outbox.Record
	inline  [1]outbox.Record // first buffer: a one-message transaction allocates no slice

	total int // rows written into the transaction so far

	// Written but not yet notified (only maintained when a Notifier is configured).
	laneBits  []uint64
	unordered int
	written   int
}

func (o *Outbox) newTx(ctx context.Context, tx *sql.Tx, attached bool) *Tx {
	t := &Tx{ob: o, tx: tx, txCtx: ctx, attached: attached}
	t.records = t.inline[:0]
	return t
}

// SQLTx returns the transaction for the application's own statements (database/sql,
// sqlx.Tx{Tx: ...}, sqlc's WithTx, ...). Complete it through Commit or Rollback, not
// directly: a directly committed transaction cannot take the buffered messages any more
// (Commit then reports them as not written).
func (t *Tx) SQLTx() *sql.Tx { return t.tx }

// Buffered returns how many published messages wait for the next Flush or Commit.
func (t *Tx) Buffered() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.records)
}

// Publish buffers msgs for topic. It copies what it keeps at call time, so the caller may
// reuse or change the messages as soon as it returns: the metadata is encoded and the
// payload copied into one owned buffer per message; UUID, topic and the strings the
// Config functions return are Go strings, immutable, and kept as they are.
//
// Publish does no I/O. It either buffers every message of the call or none: a nil
// message, an empty topic or an error from a Config function refuses the whole call. It
// fails with outbox.ErrTxDone once Commit or Rollback has started, and with
// outbox.ErrClosed after Close.
func (t *Tx) Publish(topic string, msgs ...*message.Message) error {
	if topic == "" {
		return errors.New("publisher: Publish: topic is empty")
	}
	// Prepare outside the lock (user functions, encoding, copying) so that concurrent
	// publishers only serialise on the append; small calls need no scratch allocation.
	var small [4]outbox.Record
	var large []outbox.Record // heap scratch of a call with more messages than small holds
	recs := small[:0]
	if len(msgs) > len(small) {
		large = make([]outbox.Record, 0, len(msgs))
		recs = large
	}
	var now time.Time
	if len(msgs) > 0 {
		now = t.ob.config.Now().UTC()
	}
	for i, msg := range msgs {
		if msg == nil {
			return fmt.Errorf("publisher: Publish to %q: message %d is nil", topic, i)
		}
		r, err := t.ob.prepare(t.metadataCtx(), topic, msg, now)
		if err != nil {
			return fmt.Errorf("publisher: Publish to %q: message %d (uuid %q): %w", topic, i, msg.UUID, err)
		}
		recs = append(recs, r)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return fmt.Errorf("publisher: Publish to %q: %w", topic, outbox.ErrTxDone)
	}
	if t.closed {
		return fmt.Errorf("publisher: Publish to %q: %w", topic, outbox.ErrClosed)
	}
	// Ids are taken under the lock so that buffer order is id order.
	for i := range recs {
		recs[i].ID = outbox.NewID()
	}
	if len(t.records) == 0 && large != nil {
		t.records = large[:len(recs)] // the first large call's scratch becomes the buffer
	} else {
		t.records = append(t.records, recs...)
	}
	return nil
}

// prepare turns msg into a record with owned bytes; ID is set by the caller.
func (o *Outbox) prepare(ctx context.Context, topic string, msg *message.Message, now time.Time) (outbox.Record, error) {
	c := &o.config
	md, err := o.metadata(ctx, topic, msg)
	if err != nil {
		return outbox.Record{}, err
	}
	key, err := c.OrderingKey(topic, msg)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("OrderingKey: %w", err)
	}
	deliverAt, err := c.DeliverAt(topic, msg)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("DeliverAt: %w", err)
	}
	transport, err := c.Transport(topic, msg)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("Transport: %w", err)
	}
	messageType, err := c.MessageType(topic, msg)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("MessageType: %w", err)
	}
	tenant, err := c.TenantID(topic, msg)
	if err != nil {
		return outbox.Record{}, fmt.Errorf("TenantID: %w", err)
	}
	lane := outbox.Unordered
	if key != "" {
		lane = lanes.Of(key, o.lanes)
	}
	if !deliverAt.IsZero() {
		deliverAt = deliverAt.UTC()
	}

	// One allocation holds both the encoded headers and the payload copy. The body is a
	// non-nil slice even for an empty payload: drivers send a nil []byte as NULL.
	hlen := headercodec.EncodedMetadataLen(md)
	buf := make([]byte, 0, hlen+len(msg.Payload))
	buf = headercodec.EncodeMetadata(buf, md)
	h := len(buf)
	buf = append(buf, msg.Payload...)

	return outbox.Record{
		MessageUUID: msg.UUID,
		Lane:        lane,
		OrderingKey: key,
		Transport:   transport,
		Destination: topic,
		MessageType: messageType,
		Headers:     buf[:h:h],
		Body:        buf[h:len(buf):len(buf)],
		TenantID:    tenant,
		CreatedAt:   now,
		DeliverAt:   deliverAt,
	}, nil
}

// Close stops the Tx from accepting messages (Publish then fails with outbox.ErrClosed).
// It neither commits nor rolls back: messages already buffered are still written by
// Flush or Commit, which is what Watermill's contract ("Close should flush unsent
// messages") asks of a publisher whose sending is tied to a transaction. It is
// idempotent and returns nil.
func (t *Tx) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	return nil
}

// take hands the buffer over to a writer; final marks the Tx done in the same critical
// section so that no Publish can slip in between the last write and the COMMIT.
func (t *Tx) take(final bool) ([]outbox.Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, outbox.ErrTxDone
	}
	recs := t.records
	t.records = nil
	if final {
		t.done = true
	}
	return recs, nil
}

// fail marks the Tx done after a failed write.
func (t *Tx) fail() {
	t.mu.Lock()
	t.done = true
	t.records = nil
	t.mu.Unlock()
}

// write inserts recs into the transaction.
func (t *Tx) write(ctx context.Context, recs []outbox.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publisher: %d messages not written: %w", len(recs), err)
	}
	if err := t.ob.store.Insert(ctx, t.tx, recs); err != nil {
		if errors.Is(err, sql.ErrTxDone) {
			return t.txDoneError(len(recs), err)
		}
		if t.txCtx != nil && t.txCtx.Err() != nil {
			// database/sql rolls the transaction back when its context ends, from a
			// goroutine of its own: the insert racing it may see any error ("sql: Rows
			// are closed" from a read it made, seen on MariaDB), and the outcome is the
			// rollback.
			return fmt.Errorf("%w (the insert failed with: %v)", t.txDoneError(len(recs), err), err)
		}
		return fmt.Errorf("publisher: insert %d messages: %w", len(recs), err)
	}
	t.total += len(recs)
	if len(t.ob.notifiers) > 0 {
		t.account(recs)
	}
	return nil
}

// txDoneError explains why the *sql.Tx was already complete when the outbox needed it:
// unwritten messages were still buffered (lost); the t.total that Flush wrote went with
// whatever completed the transaction.
func (t *Tx) txDoneError(unwritten int, err error) error {
	if t.txCtx != nil && t.txCtx.Err() != nil {
		// database/sql rolled the transaction back when its context ended.
		return fmt.Errorf("publisher: transaction rolled back because its context ended (%w); none of its %d messages were written: %w",
			t.txCtx.Err(), unwritten+t.total, outbox.ErrTxDone)
	}
	flushed := ""
	if t.total > 0 {
		flushed = fmt.Sprintf("; the %d messages Flush wrote into it were committed or rolled back with it", t.total)
	}
	if unwritten == 0 {
		return fmt.Errorf("%w: the *sql.Tx was committed or rolled back directly by the application%s; nothing else was buffered (%w)",
			outbox.ErrTxDone, flushed, err)
	}
	return fmt.Errorf("%w: the *sql.Tx was committed or rolled back directly by the application; %d buffered messages were NOT written%s (%w)",
		outbox.ErrTxDone, unwritten, flushed, err)
}

func (t *Tx) account(recs []outbox.Record) {
	if t.laneBits == nil {
		t.laneBits = make([]uint64, (t.ob.lanes+63)/64)
	}
	for i := range recs {
		if l := recs[i].Lane; l == outbox.Unordered {
			t.unordered++
		} else {
			t.laneBits[l/64] |= 1 << (uint(l) % 64)
		}
	}
	t.written += len(recs)
}

// Flush writes the buffered messages into the transaction without committing it; the
// buffer is then empty and Publish may go on. It is the way to use an attached
// transaction (see Outbox.Attach) and works on a begun one too.
//
// When the write fails the Tx is done (later calls return outbox.ErrTxDone) and the
// transaction must be rolled back: Flush does so itself for a transaction the outbox
// began; for an attached one the application rolls back (its ORM does when the error is
// returned). If the application completed the *sql.Tx already, the error wraps
// outbox.ErrTxDone and says how many messages were not written.
func (t *Tx) Flush(ctx context.Context) error {
	t.op.Lock()
	defer t.op.Unlock()
	recs, err := t.take(false)
	if err != nil {
		return fmt.Errorf("publisher: Flush: %w", err)
	}
	if err := t.write(ctx, recs); err != nil {
		t.fail()
		if !t.attached {
			return t.rollbackAfter(err)
		}
		return err
	}
	t.mu.Lock()
	if t.records == nil && cap(recs) > 0 {
		// Reuse the written buffer's storage (cleared so that it pins no payloads).
		clear(recs)
		t.records = recs[:0]
	}
	t.mu.Unlock()
	return nil
}

// rollbackAfter rolls back after err and returns err, joined with a rollback failure.
func (t *Tx) rollbackAfter(err error) error {
	if rbErr := t.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("publisher: rollback: %w", rbErr))
	}
	return err
}

// Commit writes every buffered message into the transaction (the store's bulk insert),
// commits it, and then tells the Notifier, if any, what was committed.
//
// ctx bounds the insert; the COMMIT itself runs under the context the transaction was
// begun with (database/sql's rule). A cancelled ctx, a failed insert or an application
// that already completed SQLTx() leaves nothing written: the transaction is rolled
// back, with the business writes. When the application had committed SQLTx() directly
// the error wraps outbox.ErrTxDone and says how many buffered messages were NOT written.
//
// An error returned by the COMMIT statement itself wraps outbox.ErrUnknownOutcome (and
// the driver's error): a lost connection or acknowledgement cannot be told apart from a
// refused commit through database/sql, so the transaction may or may not have been
// committed. Retry the whole unit of work with application-level idempotency (the
// consumer side dedupes by message UUID).
//
// A second Commit, or Commit after Rollback, returns outbox.ErrTxDone. The Notifier never
// makes a committed transaction fail: a notifier that panics is logged.
func (t *Tx) Commit(ctx context.Context) error {
	t.op.Lock()
	defer t.op.Unlock()
	recs, err := t.take(true)
	if err != nil {
		return fmt.Errorf("publisher: Commit: %w", err)
	}
	if err := t.write(ctx, recs); err != nil {
		return t.rollbackAfter(err)
	}
	if err := ctx.Err(); err != nil {
		return t.rollbackAfter(fmt.Errorf("publisher: commit: %w", err))
	}
	if err := t.tx.Commit(); err != nil {
		return t.commitError(err)
	}
	t.ob.committed.Add(1)
	t.notify()
	return nil
}

// commitError classifies an error from sql.Tx.Commit, after every buffered message was
// written into the transaction (t.total in all).
func (t *Tx) commitError(err error) error {
	n := t.total
	switch {
	case errors.Is(err, sql.ErrTxDone):
		// Never sent: the application or database/sql (context ended) completed it,
		// with everything written so far.
		return t.txDoneError(0, err)
	case t.txCtx != nil && t.txCtx.Err() != nil && errors.Is(err, t.txCtx.Err()):
		// database/sql checks the context before sending COMMIT and rolls back instead.
		return fmt.Errorf("publisher: commit: transaction context ended before COMMIT, rolled back: %w", err)
	default:
		return fmt.Errorf("publisher: commit of %d messages: %w: %w", n, outbox.ErrUnknownOutcome, err)
	}
}

// Rollback discards the buffered messages and rolls the transaction back. A second call,
// or one after Commit, returns outbox.ErrTxDone (like sql.Tx, so `defer tx.Rollback()`
// is the usual idiom). If the application committed SQLTx() directly, the error wraps
// outbox.ErrTxDone.
func (t *Tx) Rollback() error {
	t.op.Lock()
	defer t.op.Unlock()
	if _, err := t.take(true); err != nil {
		return fmt.Errorf("publisher: Rollback: %w", err)
	}
	err := t.tx.Rollback()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone):
		if t.txCtx != nil && t.txCtx.Err() != nil {
			return nil // database/sql already rolled back when the context ended
		}
		return fmt.Errorf("publisher: Rollback: the *sql.Tx was already completed by the application: %w", outbox.ErrTxDone)
	default:
		return fmt.Errorf("publisher: rollback: %w", err)
	}
}

// NotifyCommitted tells the Notifier what the Flush calls of an attached transaction
// wrote; call it after the application's own commit succeeded. The wake-up is optional
// (the forwarder's polling finds the rows anyway; nothing happens without a Notifier
// or when nothing was flushed since the last notification), but the check is not:
// messages published after the last Flush were not written into the committed
// transaction, and NotifyCommitted returns an error wrapping outbox.ErrNotFlushed that
// counts them (and logs it), then forgets them. Commit notifies by itself and writes
// its whole buffer, so on a begun Tx the error is always nil.
func (t *Tx) NotifyCommitted() error {
	t.op.Lock()
	defer t.op.Unlock()
	err := t.unflushed()
	t.notify()
	return err
}

// notify sends and resets the written summary; callers hold t.op.
func (t *Tx) notify() {
	if len(t.ob.notifiers) == 0 || t.written == 0 {
		return
	}
	c := outbox.Commit{Unordered: t.unordered}
	count := 0
	for _, w := range t.laneBits {
		count += bits.OnesCount64(w)
	}
	if count > 0 {
		c.Lanes = make([]int, 0, count)
		for i, w := range t.laneBits {
			for w != 0 {
				b := bits.TrailingZeros64(w)
				c.Lanes = append(c.Lanes, i*64+b)
				w &^= 1 << uint(b)
			}
			t.laneBits[i] = 0
		}
	}
	t.unordered, t.written = 0, 0
	for _, n := range t.ob.notifiers {
		t.notifyOne(n, c)
	}
}

// notifyOne calls n, logging a panic: the commit stands.
func (t *Tx) notifyOne(n outbox.Notifier, c outbox.Commit) {
	defer func() {
		if r := recover(); r != nil {
			t.ob.logger.Error("publisher: Notifier panicked after a successful commit (the commit stands)",
				fmt.Errorf("panic: %v", r), watermill.LogFields{"notifier": fmt.Sprintf("%T", n), "lanes": len(c.Lanes), "unordered": c.Unordered})
		}
	}()
	n.Notify(c)
}

var _ message.Publisher = (*Tx)(nil)
