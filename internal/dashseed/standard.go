package dashseed

import (
	"context"
	"errors"
	"fmt"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Seeded names the rows Standard wrote.
type Seeded struct {
	At             time.Time // CreatedAt of every row
	ParkedPayments []outbox.ID
	ParkedEmails   []outbox.ID
	Hostile        []outbox.Record
}

// Parked is how many rows Standard parked: 2 payments, 3 emails and the hostile rows
// (4, and a fifth where the store takes an ordering key that is not UTF-8).
func (s Seeded) Parked() int { return 5 + len(s.Hostile) }

// Figures of Standard's rows, as the dashboard shows them.
const (
	StdOrdered    = 4 // eligible rows in lanes (keys k1, k1, k2, k3)
	StdUnordered  = 3
	StdScheduled  = 2 // due in an hour
	StdInbox      = 3 // entries: billing u1, u2; shipping u1
	StdDuplicates = 1 // billing u1 delivered twice
)

// HostileError is the last error of the hostile parked rows (with invalid UTF-8: the
// stores keep error texts as given, or replace what their column cannot hold).
var HostileError = HostileText("error") + " \xff\xfe"

// Standard writes a minute ago: 3 unordered and 4 ordered eligible "orders" rows, 2
// rows scheduled an hour ahead, 2 parked "payments" rows (error "timeout talking to
// broker"; one with a JSON payload and key "p1"), 3 parked "emails" rows (error "SMTP
// refused"), the hostile rows parked with HostileError, and (when the store has an
// inbox) 3 inbox entries and one duplicate.
func Standard(ctx context.Context, store outbox.Store) (Seeded, error) {
	n := store.Options().Lanes
	s := Seeded{At: time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)}
	var recs []outbox.Record
	for i := range StdUnordered {
		recs = append(recs, Row("orders", "", []byte{byte('a' + i)}, nil, s.At, n))
	}
	for _, k := range []string{"k1", "k1", "k2", "k3"} {
		recs = append(recs, Row("orders", k, []byte("o"), nil, s.At, n))
	}
	for range StdScheduled {
		r := Row("later", "", nil, nil, s.At, n)
		r.DeliverAt = s.At.Add(time.Hour)
		recs = append(recs, r)
	}
	if err := Insert(ctx, store, recs); err != nil {
		return s, err
	}
	pay := []outbox.Record{Row("payments", "", []byte(`{"amount":12.5,"currency":"EUR","lines":[1,2]}`), map[string]string{"trace": "t-1"}, s.At, n),
		Row("payments", "p1", []byte("plain text payment"), nil, s.At, n)}
	em := []outbox.Record{Row("emails", "", nil, nil, s.At, n), Row("emails", "", nil, nil, s.At, n), Row("emails", "", nil, nil, s.At, n)}
	s.Hostile = HostileRows(s.At, n)
	for _, p := range []struct {
		recs   []outbox.Record
		reason string
	}{{pay, "timeout talking to broker"}, {em, "SMTP refused"}, {s.Hostile, HostileError}} {
		if err := Park(ctx, store, p.recs, p.reason, 2); err != nil {
			return s, err
		}
	}
	if r, ok, err := invalidKeyRow(ctx, store, s.At); err != nil {
		return s, err
	} else if ok {
		s.Hostile = append(s.Hostile, r)
	}
	for _, r := range pay {
		s.ParkedPayments = append(s.ParkedPayments, r.ID)
	}
	for _, r := range em {
		s.ParkedEmails = append(s.ParkedEmails, r.ID)
	}
	return s, inboxEntries(ctx, store, s.At)
}

// invalidKeyRow parks a row whose ordering key is markup with invalid UTF-8, when the
// store takes such a key (MySQL keeps keys as bytes; PostgreSQL refuses them with
// ErrInvalidRecord, and then there is no such row).
func invalidKeyRow(ctx context.Context, store outbox.Store, at time.Time) (outbox.Record, bool, error) {
	r := Row(HostileText("badkey"), "k\xff\xfe"+Script, []byte("x"), nil, at, store.Options().Lanes)
	r.MessageType, r.Transport, r.TenantID = HostileText("type"), HostileText("transport"), HostileText("tenant")
	err := Park(ctx, store, []outbox.Record{r}, HostileError, 1)
	if errors.Is(err, outbox.ErrInvalidRecord) {
		return r, false, nil
	}
	return r, err == nil, err
}

func inboxEntries(ctx context.Context, store outbox.Store, at time.Time) error {
	in, ok := store.(outbox.Inbox)
	if !ok {
		return nil
	}
	for _, e := range [][2]string{{"billing", "u1"}, {"billing", "u2"}, {"shipping", "u1"}, {"billing", "u1"}} {
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := in.RecordInbox(ctx, tx, e[0], e[1], at); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("inbox entry %v: %w", e, err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
