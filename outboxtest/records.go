package outboxtest

import (
	"bytes"
	"fmt"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// BaseTime is the fixed instant the suite's clocks start from: every "now" the suite
// passes to a store is BaseTime plus an offset, so boundaries are exact and no test
// depends on the wall clock (only new IDs do). It has microsecond precision, the finest
// every engine keeps.
func BaseTime() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC) }

// NewRecord returns an unordered record with a fresh ID and sane defaults: a message
// UUID derived from the ID, destination "outboxtest.topic", one header, a short body,
// created (and due) at createdAt.
func NewRecord(createdAt time.Time) outbox.Record {
	id := outbox.NewID()
	return outbox.Record{
		ID:          id,
		MessageUUID: "uuid-" + id.String(),
		Lane:        outbox.Unordered,
		Destination: "outboxtest.topic",
		Headers:     headercodec.Encode(nil, []headercodec.Header{{Name: "source", Value: []byte("outboxtest")}}),
		Body:        []byte("body-" + id.String()),
		CreatedAt:   createdAt,
	}
}

// NewOrderedRecord returns NewRecord(createdAt) with ordering key key, in the lane the
// key maps to among laneCount lanes (lanes.Of).
func NewOrderedRecord(createdAt time.Time, key string, laneCount int) outbox.Record {
	r := NewRecord(createdAt)
	r.OrderingKey = key
	r.Lane = lanes.Of(key, laneCount)
	return r
}

// stored returns what a store must give back for r as inserted: pending, no attempts,
// no claim, DeliverAt defaulted to CreatedAt, instants in UTC.
func stored(r outbox.Record) outbox.Record {
	if r.DeliverAt.IsZero() {
		r.DeliverAt = r.CreatedAt
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.DeliverAt = r.DeliverAt.UTC()
	r.Attempts = 0
	r.LastError = ""
	r.Status = outbox.StatusPending
	r.ClaimToken = outbox.Token{}
	r.ClaimExpiresAt = time.Time{}
	r.Corrupt = nil
	return r
}

// cloneRecord copies r's byte slices, which a store may share with its buffers.
func cloneRecord(r outbox.Record) outbox.Record {
	r.Headers = bytes.Clone(r.Headers)
	r.Body = bytes.Clone(r.Body)
	return r
}

func cloneRecords(rs []outbox.Record) []outbox.Record {
	out := make([]outbox.Record, len(rs))
	for i := range rs {
		out[i] = cloneRecord(rs[i])
	}
	return out
}

// diffRecord lists the fields in which got differs from want; instants must be equal
// and, when set, in UTC.
func diffRecord(got, want outbox.Record) []string {
	var d []string
	add := func(field string, g, w any) {
		d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w))
	}
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.MessageUUID != want.MessageUUID {
		add("MessageUUID", quote(got.MessageUUID), quote(want.MessageUUID))
	}
	if got.Lane != want.Lane {
		add("Lane", got.Lane, want.Lane)
	}
	if got.OrderingKey != want.OrderingKey {
		add("OrderingKey", quote(got.OrderingKey), quote(want.OrderingKey))
	}
	if got.Transport != want.Transport {
		add("Transport", quote(got.Transport), quote(want.Transport))
	}
	if got.Destination != want.Destination {
		add("Destination", quote(got.Destination), quote(want.Destination))
	}
	if got.MessageType != want.MessageType {
		add("MessageType", quote(got.MessageType), quote(want.MessageType))
	}
	if !bytes.Equal(got.Headers, want.Headers) {
		add("Headers", short(got.Headers), short(want.Headers))
	}
	if got.BodySize != want.BodySize {
		add("BodySize", got.BodySize, want.BodySize)
	}
	if !bytes.Equal(got.Body, want.Body) {
		add("Body", short(got.Body), short(want.Body))
	}
	if got.TenantID != want.TenantID {
		add("TenantID", quote(got.TenantID), quote(want.TenantID))
	}
	d = append(d, diffTime("CreatedAt", got.CreatedAt, want.CreatedAt)...)
	d = append(d, diffTime("DeliverAt", got.DeliverAt, want.DeliverAt)...)
	if got.Attempts != want.Attempts {
		add("Attempts", got.Attempts, want.Attempts)
	}
	if got.LastError != want.LastError {
		add("LastError", quote(got.LastError), quote(want.LastError))
	}
	if got.Status != want.Status {
		add("Status", quote(string(got.Status)), quote(string(want.Status)))
	}
	if got.ClaimToken != want.ClaimToken {
		add("ClaimToken", got.ClaimToken, want.ClaimToken)
	}
	d = append(d, diffTime("ClaimExpiresAt", got.ClaimExpiresAt, want.ClaimExpiresAt)...)
	if (got.Corrupt == nil) != (want.Corrupt == nil) {
		add("Corrupt", got.Corrupt, want.Corrupt)
	}
	return d
}

func diffTime(field string, got, want time.Time) []string {
	var d []string
	if !got.Equal(want) {
		d = append(d, fmt.Sprintf("%s: got %s, want %s", field, fmtTime(got), fmtTime(want)))
	}
	if !got.IsZero() && got.Location() != time.UTC {
		d = append(d, fmt.Sprintf("%s: location %q, want UTC", field, got.Location()))
	}
	return d
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.Format("2006-01-02T15:04:05.000000000Z07:00")
}

func quote(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", s[:80], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func short(b []byte) string {
	if b == nil {
		return "nil"
	}
	if len(b) > 40 {
		return fmt.Sprintf("%x... (%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%x (%d bytes)", b, len(b))
}

// newRecords returns n records of NewRecord(at(0)), in ID order.
func newRecords(n int) []outbox.Record {
	recs := make([]outbox.Record, n)
	for i := range recs {
		recs[i] = NewRecord(at(0))
	}
	return recs
}
