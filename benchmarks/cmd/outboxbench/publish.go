package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	wmforwarder "github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// publishSection: each transaction inserts one business row and N messages, then
// commits. Three contenders take turns transaction by transaction (the order rotates),
// so they meet the same database state; each run sums their times and computes the
// ratios from those sums.
func publishSection(ctx context.Context, e *engine, cfg config, sec *section) error {
	ours, err := e.newOutboxTable(ctx)
	if err != nil {
		return err
	}
	defer ours.drop()
	raw, err := e.newOutboxTable(ctx)
	if err != nil {
		return err
	}
	defer raw.drop()
	wm, err := e.newWMTables(ctx, false, 0)
	if err != nil {
		return err
	}
	defer wm.drop()
	orders := e.quote(ours.opts.TablePrefix + "orders")
	ddl := "CREATE TABLE " + orders + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)"
	if e.name == "postgres" {
		ddl = "CREATE TABLE " + orders + " (id BIGSERIAL PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)"
	}
	if _, err := e.db.ExecContext(ctx, ddl); err != nil {
		return err
	}
	defer e.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+orders)
	business := fmt.Sprintf("INSERT INTO %s (customer, amount) VALUES (%s, %s)", orders, e.ph(1), e.ph(2))
	// The minimal outbox row a hand-written outbox would keep: what a forwarder must
	// read to send, and nothing else (primary key only).
	minimal := e.quote(ours.opts.TablePrefix + "minimal")
	mddl := "CREATE TABLE " + minimal + " (id BINARY(16) NOT NULL PRIMARY KEY, topic VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, metadata BLOB)"
	if e.name == "postgres" {
		mddl = "CREATE TABLE " + minimal + " (id BYTEA PRIMARY KEY, topic TEXT NOT NULL, payload BYTEA NOT NULL, metadata BYTEA)"
	}
	if _, err := e.db.ExecContext(ctx, mddl); err != nil {
		return err
	}
	defer e.db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+minimal)

	ob, err := publisher.New(ours.store, publisher.Config{}, nil)
	if err != nil {
		return err
	}
	p := &publishPath{e: e, ob: ob, raw: raw, wm: wm, business: business, minimal: minimal}

	sizes := []int{1, 64, 1000}
	for _, n := range sizes {
		txs := cfg.publishTx[n]
		// One untimed round first: connection setup, statement caches.
		if err := p.round(ctx, n, 0); err != nil {
			return err
		}
		for run := 0; run < cfg.runs; run++ {
			// Per run: the median transaction time of each contender, and the median of
			// the per-round ratios (a load spike hits one round, not the figure).
			var times [4][]float64
			var oursRaw, wmOurs, oursMinimal []float64
			for i := 0; i < txs; i++ {
				d, err := p.roundTimed(ctx, n, i+run)
				if err != nil {
					return err
				}
				for k := range d {
					times[k] = append(times[k], float64(d[k])/float64(time.Microsecond))
				}
				oursRaw = append(oursRaw, float64(d[0])/float64(d[2]))
				wmOurs = append(wmOurs, float64(d[1])/float64(d[0]))
				oursMinimal = append(oursMinimal, float64(d[3])/float64(d[0]))
			}
			key := fmt.Sprintf("n%d", n)
			ours := median(times[0])
			sec.add(key+"/ours_us_per_tx", fmt.Sprintf("N=%d ours (publisher)", n), "µs/tx", ours)
			sec.add(key+"/watermill_us_per_tx", fmt.Sprintf("N=%d watermill-sql", n), "µs/tx", median(times[1]))
			sec.add(key+"/raw_us_per_tx", fmt.Sprintf("N=%d raw INSERT", n), "µs/tx", median(times[2]))
			sec.add(key+"/ours_msgs_per_s", fmt.Sprintf("N=%d ours throughput (one connection)", n), "msgs/s", float64(n)/(ours/1e6))
			sec.add(key+"/ratio_ours_raw", fmt.Sprintf("N=%d time ours / raw", n), "ratio", median(oursRaw))
			sec.add(key+"/ratio_watermill_ours", fmt.Sprintf("N=%d time watermill-sql / ours", n), "ratio", median(wmOurs))
			sec.add(key+"/minimal_us_per_tx", fmt.Sprintf("N=%d minimal row INSERT (id, topic, payload, metadata; PK only)", n), "µs/tx", median(times[3]))
			sec.add(key+"/ratio_ours_minimal_rate", fmt.Sprintf("N=%d rate ours / minimal row (time minimal / ours)", n), "ratio", median(oursMinimal))
		}
		// Keep the tables small between sizes.
		for _, t := range []string{ours.name(), raw.name(), wm.messagesTable(), minimal} {
			if _, err := e.db.ExecContext(ctx, "DELETE FROM "+t); err != nil {
				return err
			}
		}
	}
	sec.note("%s", "Each transaction: one business INSERT + N messages + COMMIT, one connection from the pool. "+
		"ours = publisher.Begin/Publish/Commit; watermill-sql = sql.NewPublisher on the *sql.Tx (DefaultSchema, schema created beforehand) "+
		"wrapped in components/forwarder's envelope publisher, as Watermill's outbox is used; "+
		"raw = one hand-written multi-row INSERT of the same outbox rows (headers encoded with headercodec); "+
		"minimal = one multi-row INSERT of a minimal outbox row (id, topic, payload, metadata; primary key only). "+
		"Times are the median transaction of a run; ratios the median of per-round ratios (the three contenders take turns, order rotating); "+
		"> 1 means the first contender takes longer. Transactions per run (N:count): "+fmt.Sprint(cfg.publishTx)+".")
	return nil
}

type publishPath struct {
	e        *engine
	ob       *publisher.Outbox
	raw      *outboxTable
	wm       *wmTables
	business string
	rawSQL   map[int]string
	minimal  string // the minimal row's table, quoted
	minSQL   map[int]string
}

func (p *publishPath) round(ctx context.Context, n, rot int) error {
	_, err := p.roundTimed(ctx, n, rot)
	return err
}

// roundTimed runs one transaction of each contender (order rotated by rot) and returns
// their durations: ours, watermill-sql, raw, minimal.
func (p *publishPath) roundTimed(ctx context.Context, n, rot int) ([4]time.Duration, error) {
	var d [4]time.Duration
	fns := [4]func(context.Context, []*message.Message) error{p.ours, p.watermill, p.rawInsert, p.minimalInsert}
	msgs := newMessages(n)
	for k := 0; k < 4; k++ {
		i := (k + rot) % 4
		t0 := time.Now()
		if err := retry(ctx, p.e, func() error { return fns[i](ctx, msgs) }); err != nil {
			return d, fmt.Errorf("%s: %w", [4]string{"ours", "watermill-sql", "raw", "minimal"}[i], err)
		}
		d[i] = time.Since(t0)
	}
	return d, nil
}

func (p *publishPath) ours(ctx context.Context, msgs []*message.Message) error {
	tx, err := p.ob.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.SQLTx().ExecContext(ctx, p.business, "c-42", 1999); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Publish(destination, msgs...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit(ctx)
}

func (p *publishPath) watermill(ctx context.Context, msgs []*message.Message) error {
	tx, err := p.e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := func() error {
		if _, err := tx.ExecContext(ctx, p.business, "c-42", 1999); err != nil {
			return err
		}
		pub, err := p.wm.publisherOn(tx)
		if err != nil {
			return err
		}
		fp := wmforwarder.NewPublisher(pub, wmforwarder.PublisherConfig{ForwarderTopic: p.wm.topic})
		return fp.Publish(destination, msgs...)
	}(); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// rawInsert is the floor: the same outbox rows in one hand-written multi-row INSERT
// (statement text cached per size, as hand-written code would).
func (p *publishPath) rawInsert(ctx context.Context, msgs []*message.Message) error {
	if p.rawSQL == nil {
		p.rawSQL = map[int]string{}
	}
	const cols = 8
	q, ok := p.rawSQL[len(msgs)]
	if !ok {
		var b strings.Builder
		b.WriteString("INSERT INTO " + p.raw.name() + " (id, message_uuid, lane, destination, headers, body, created_at, deliver_at) VALUES ")
		for i := range msgs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('(')
			for c := 0; c < cols; c++ {
				if c > 0 {
					b.WriteByte(',')
				}
				b.WriteString(p.e.ph(i*cols + c + 1))
			}
			b.WriteByte(')')
		}
		q = b.String()
		p.rawSQL[len(msgs)] = q
	}
	now := time.Now().UTC()
	args := make([]any, 0, cols*len(msgs))
	for _, m := range msgs {
		id := outbox.NewID()
		args = append(args, id[:], m.UUID, p.e.unorderedLane(), destination, headercodec.EncodeMetadata(nil, m.Metadata), []byte(m.Payload), now, now)
	}
	return p.businessTx(ctx, q, args)
}

// minimalInsert is the minimal row's floor: one multi-row INSERT of (id, topic,
// payload, metadata) into a table with a primary key only.
func (p *publishPath) minimalInsert(ctx context.Context, msgs []*message.Message) error {
	if p.minSQL == nil {
		p.minSQL = map[int]string{}
	}
	const cols = 4
	q, ok := p.minSQL[len(msgs)]
	if !ok {
		var b strings.Builder
		b.WriteString("INSERT INTO " + p.minimal + " (id, topic, payload, metadata) VALUES ")
		for i := range msgs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%s,%s,%s,%s)", p.e.ph(i*cols+1), p.e.ph(i*cols+2), p.e.ph(i*cols+3), p.e.ph(i*cols+4))
		}
		q = b.String()
		p.minSQL[len(msgs)] = q
	}
	args := make([]any, 0, cols*len(msgs))
	for _, m := range msgs {
		id := outbox.NewID()
		args = append(args, id[:], destination, []byte(m.Payload), headercodec.EncodeMetadata(nil, m.Metadata))
	}
	return p.businessTx(ctx, q, args)
}

// businessTx runs the business INSERT and q in one transaction, as the hand-written
// contenders do.
func (p *publishPath) businessTx(ctx context.Context, q string, args []any) error {
	tx, err := p.e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, p.business, "c-42", 1999); err != nil {
		_ = tx.Rollback()
		return err
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
