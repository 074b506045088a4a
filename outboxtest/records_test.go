package outboxtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/lanes"
)

func TestNewRecordIsValid(t *testing.T) {
	r := NewRecord(BaseTime())
	if r.ID.IsZero() || r.Lane != outbox.Unordered || r.Destination == "" || !r.CreatedAt.Equal(BaseTime()) {
		t.Fatalf("NewRecord = %+v", r)
	}
	if _, err := headercodec.Decode(r.Headers, nil); err != nil {
		t.Fatalf("headers: %v", err)
	}
	if r2 := NewRecord(BaseTime()); r2.ID.Compare(r.ID) <= 0 {
		t.Fatalf("ids not increasing")
	}
	o := NewOrderedRecord(BaseTime(), "k", 8)
	if o.OrderingKey != "k" || o.Lane != lanes.Of("k", 8) {
		t.Fatalf("NewOrderedRecord = lane %d key %q", o.Lane, o.OrderingKey)
	}
}

func TestBaseTimeIsMicrosecondUTC(t *testing.T) {
	b := BaseTime()
	if b.Location() != time.UTC || b.Nanosecond()%1000 != 0 || !b.Equal(BaseTime()) {
		t.Fatalf("BaseTime = %v", b)
	}
}

// diffRecord must notice every field, and instants outside UTC.
func TestDiffRecordSeesEveryField(t *testing.T) {
	base := stored(NewOrderedRecord(BaseTime(), "k", 8))
	base.ClaimToken, base.ClaimExpiresAt = outbox.NewToken(), BaseTime().Add(time.Minute)
	mutations := map[string]func(*outbox.Record){
		"ID":             func(r *outbox.Record) { r.ID = outbox.NewID() },
		"MessageUUID":    func(r *outbox.Record) { r.MessageUUID += "x" },
		"Lane":           func(r *outbox.Record) { r.Lane++ },
		"OrderingKey":    func(r *outbox.Record) { r.OrderingKey += "x" },
		"Transport":      func(r *outbox.Record) { r.Transport += "x" },
		"Destination":    func(r *outbox.Record) { r.Destination += "x" },
		"MessageType":    func(r *outbox.Record) { r.MessageType += "x" },
		"Headers":        func(r *outbox.Record) { r.Headers = append([]byte{}, r.Headers[:len(r.Headers)-1]...) },
		"Body":           func(r *outbox.Record) { r.Body = nil },
		"TenantID":       func(r *outbox.Record) { r.TenantID += "x" },
		"CreatedAt":      func(r *outbox.Record) { r.CreatedAt = r.CreatedAt.Add(time.Microsecond) },
		"DeliverAt":      func(r *outbox.Record) { r.DeliverAt = r.DeliverAt.In(time.FixedZone("x", 3600)) },
		"Attempts":       func(r *outbox.Record) { r.Attempts++ },
		"LastError":      func(r *outbox.Record) { r.LastError += "x" },
		"Status":         func(r *outbox.Record) { r.Status = outbox.StatusParked },
		"ClaimToken":     func(r *outbox.Record) { r.ClaimToken = outbox.Token{} },
		"ClaimExpiresAt": func(r *outbox.Record) { r.ClaimExpiresAt = time.Time{} },
		"Corrupt":        func(r *outbox.Record) { r.Corrupt = errors.New("x") },
	}
	if d := diffRecord(cloneRecord(base), base); len(d) != 0 {
		t.Fatalf("equal records differ: %v", d)
	}
	for field, mutate := range mutations {
		got := cloneRecord(base)
		mutate(&got)
		d := diffRecord(got, base)
		if len(d) != 1 || !strings.HasPrefix(d[0], field+":") {
			t.Errorf("mutating %s: diff %q", field, d)
		}
	}
}

func TestKeysInLane(t *testing.T) {
	for lane := 0; lane < testLanes; lane++ {
		keys := keysInLane(lane, testLanes, 3)
		if len(keys) != 3 || keys[0] == keys[1] {
			t.Fatalf("lane %d: %q", lane, keys)
		}
		for _, k := range keys {
			if lanes.Of(k, testLanes) != lane {
				t.Fatalf("key %q is not in lane %d", k, lane)
			}
		}
	}
}

func TestIDAtOrdersByTimeThenBytes(t *testing.T) {
	a, b, c := idAt(0x00FF_FFFF_FFFF, 0xff), idAt(0x0100_0000_0000, 0x00), idAt(0x0100_0000_0000, 0x01)
	if a.Compare(b) >= 0 || b.Compare(c) >= 0 {
		t.Fatalf("idAt order: %s %s %s", a, b, c)
	}
	if got := b.Time(); got.UnixMilli() != 0x0100_0000_0000 {
		t.Fatalf("idAt time = %d", got.UnixMilli())
	}
}

func ExampleNewOrderedRecord() {
	r := NewOrderedRecord(BaseTime(), "order-42", 64)
	fmt.Println(r.OrderingKey, r.Lane, r.Ordered(), r.CreatedAt.Format(time.RFC3339Nano))
	// Output: order-42 52 true 2026-01-02T03:04:05.123456Z
}
