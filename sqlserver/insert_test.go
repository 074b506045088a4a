package sqlserver

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

// The sizes: 1, 64 and 1,000 and 10,000 rows. Whatever path a batch takes, the
// parameterised plan for it covers every row once, in order, with no statement over
// 2,000 parameters (SQL Server allows 2,100) or 1,000 rows.
func TestPlanChunks(t *testing.T) {
	cols := len(insertCols)
	for _, c := range []struct {
		rows       int
		statements int
		bulk       bool
	}{
		{1, 1, false},
		{64, 1, false},
		{65, 1, true},
		{166, 1, true},  // 166 * 12 = 1,992 parameters
		{167, 2, true},  // one more would be 2,004
		{1000, 7, true}, // ceil(1000/166)
		{10000, 61, true},
	} {
		plan := planChunks(c.rows, cols)
		if len(plan) != c.statements {
			t.Errorf("%d rows: %d statements, want %d", c.rows, len(plan), c.statements)
		}
		next := 0
		for _, ch := range plan {
			n := ch.End - ch.Start
			switch {
			case ch.Start != next:
				t.Fatalf("%d rows: chunk %v starts at %d, want %d", c.rows, ch, ch.Start, next)
			case n < 1 || n > maxRowsPerInsert:
				t.Fatalf("%d rows: chunk %v has %d rows", c.rows, ch, n)
			case n*cols > maxParams || n*cols > 2100:
				t.Fatalf("%d rows: chunk %v has %d parameters", c.rows, ch, n*cols)
			}
			next = ch.End
		}
		if next != c.rows {
			t.Fatalf("%d rows: plan ends at %d", c.rows, next)
		}
		if got := useBulk(c.rows, 0); got != c.bulk {
			t.Errorf("%d rows: useBulk = %v, want %v", c.rows, got, c.bulk)
		}
	}
	if planChunks(0, cols) != nil {
		t.Error("0 rows: want no statements")
	}
	if !useBulk(1, BulkBytes+1) || useBulk(1, BulkBytes) {
		t.Error("the byte budget decides for small batches of large rows")
	}
	// Few columns: the 1,000-row limit binds before the parameter limit.
	for _, ch := range planChunks(10000, 1) {
		if ch.End-ch.Start > maxRowsPerInsert {
			t.Fatalf("1 column: chunk %v over %d rows", ch, maxRowsPerInsert)
		}
	}
}

// The generated INSERT uses exactly one parameter per value, numbered @p1..@pN in
// order (an optional string's appears twice: its length is tested, then it is used).
func TestInsertStatementParameters(t *testing.T) {
	q := newQueries(newNames(outbox.Options{}))
	for _, rows := range []int{1, 64, 166} {
		sql := q.insert(rows)
		var order []string
		seen := map[string]bool{}
		for _, m := range regexp.MustCompile(`@p(\d+)`).FindAllStringSubmatch(sql, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				order = append(order, m[1])
			}
		}
		if len(order) != rows*len(insertCols) {
			t.Fatalf("%d rows: %d parameters", rows, len(order))
		}
		for i, n := range order {
			if n != strconv.Itoa(i+1) {
				t.Fatalf("%d rows: parameter %d is @p%s", rows, i+1, n)
			}
		}
		if lists := strings.Count(sql, "), (@p") + 1; lists != rows {
			t.Fatalf("%d rows: %d value lists", rows, lists)
		}
	}
}

func validRecord() outbox.Record {
	id := outbox.NewID()
	return outbox.Record{
		ID: id, MessageUUID: "u", Lane: outbox.Unordered, Destination: "d",
		Headers: headercodec.Encode(nil, nil), Body: []byte("b"), CreatedAt: time.Now(),
	}
}

// Every record is checked before anything is sent: an invalid one anywhere in the batch
// fails the call with ErrInvalidRecord naming it (the nil transaction is never used).
func TestInsertValidatesFirst(t *testing.T) {
	s, err := New(openUnreachable(t), outbox.Options{Lanes: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		mutate   func(r *outbox.Record)
		contains string
	}{
		{"zero id", func(r *outbox.Record) { r.ID = outbox.ID{} }, "zero id"},
		{"lane too big", func(r *outbox.Record) { r.Lane = 8 }, "lane 8 out of range [-1, 8)"},
		{"lane below unordered", func(r *outbox.Record) { r.Lane = -2 }, "lane -2"},
		{"empty headers", func(r *outbox.Record) { r.Headers = nil }, "headers"},
		{"corrupt headers", func(r *outbox.Record) { r.Headers = []byte{9, 0, 0, 0, 0, 0, 0, 0} }, "unknown version"},
		{"invalid UTF-8 key", func(r *outbox.Record) { r.OrderingKey = "\xff"; r.Lane = 1 }, "OrderingKey"},
		{"invalid UTF-8 destination", func(r *outbox.Record) { r.Destination = "a\xc3" }, "Destination"},
	} {
		recs := []outbox.Record{validRecord(), validRecord(), validRecord()}
		c.mutate(&recs[2])
		err := s.Insert(context.Background(), nil, recs)
		if !errors.Is(err, outbox.ErrInvalidRecord) {
			t.Errorf("%s: %v does not wrap ErrInvalidRecord", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.contains) || !strings.Contains(err.Error(), "record 2") {
			t.Errorf("%s: error %q lacks %q or the record index", c.name, err, c.contains)
		}
	}
	if err := s.Insert(context.Background(), nil, []outbox.Record{validRecord()}); err == nil || errors.Is(err, outbox.ErrInvalidRecord) {
		t.Errorf("nil transaction: %v", err)
	}
}

// An empty body goes out as an empty value, never NULL (the column is NOT NULL);
// DeliverAt defaults to CreatedAt; instants go out in UTC.
func TestBulkRow(t *testing.T) {
	r := validRecord()
	r.Body = nil
	r.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	args := bulkRow(nil, &r)
	if len(args) != len(insertCols) {
		t.Fatalf("%d values for %d columns", len(args), len(insertCols))
	}
	if b, ok := args[8].([]byte); !ok || b == nil {
		t.Fatalf("body %#v, want a non-nil empty slice", args[8])
	}
	if args[2] != nil || args[3] != nil || args[6] != nil || args[9] != nil {
		t.Fatalf("unordered row without key, type and tenant must send NULLs: %#v", args)
	}
	created, deliver := args[10].(time.Time), args[11].(time.Time)
	if created.Location() != time.UTC || !deliver.Equal(r.CreatedAt) || deliver.Location() != time.UTC {
		t.Fatalf("created %v, deliver %v", created, deliver)
	}
	if id := args[0].([]byte); len(id) != 16 || [16]byte(id) != r.ID {
		t.Fatalf("id %x", id)
	}
	r.Lane = 3
	if lane := bulkRow(nil, &r)[2]; lane != int32(3) {
		t.Fatalf("lane %#v, want int32(3) (an int parameter, not bigint)", lane)
	}
}

// Bulk copy gets the same quoted name the statements use; FuzzNames shows that
// go-mssqldb keeps it as given.
func TestBulkCopyTableName(t *testing.T) {
	o := outbox.Options{Schema: "s]x", TablePrefix: "p].[q_"}
	name := newQueries(newNames(o)).outbox
	if name != QualifiedTable(o, o.OutboxTable()) {
		t.Fatalf("bulk copy table %s, statements use %s", name, QualifiedTable(o, o.OutboxTable()))
	}
	if got, err := quoteObjectName(name); err != nil || got != name {
		t.Fatalf("go-mssqldb quotes %s as %s (%v)", name, got, err)
	}
	// What the driver does with the raw, unquoted name instead: it splits on the dot,
	// naming another table. This is why the name must go in quoted.
	if got, _ := quoteObjectName(o.Schema + "." + o.OutboxTable()); got == name {
		t.Fatalf("raw name unexpectedly quoted to %s", got)
	}
}

// The values bulkRow sends are of the Go types go-mssqldb v1.11.2's bulk copy accepts
// for each column (Bulk.makeParam switches on
// the column's type: []byte for binary and varbinary, string for nvarchar, an integer
// for int, time.Time for datetimeoffset, untyped nil for NULL). A nil []byte would go
// out as NULL (a PLP NULL in bulk copy), which the NOT NULL columns reject.
func TestBulkRowTypes(t *testing.T) {
	full := validRecord()
	full.Lane, full.OrderingKey, full.MessageType, full.TenantID = 2, "k", "t", "x"
	full.Body = nil
	bare := validRecord()
	bare.Body = []byte{}
	for _, r := range []outbox.Record{full, bare} {
		args := bulkRow(nil, &r)
		for i, col := range insertCols {
			v := args[i]
			ok := false
			switch col {
			case "id":
				b, isBytes := v.([]byte)
				ok = isBytes && len(b) == 16
			case "headers", "body":
				b, isBytes := v.([]byte)
				ok = isBytes && b != nil
			case "message_uuid", "transport", "destination":
				_, ok = v.(string)
			case "ordering_key", "message_type", "tenant_id":
				_, isString := v.(string)
				ok = v == nil || isString
			case "lane":
				_, isInt := v.(int32)
				ok = v == nil || isInt
			case "created_at", "deliver_at":
				tm, isTime := v.(time.Time)
				ok = isTime && tm.Location() == time.UTC
			default:
				t.Fatalf("column %s has no expectation", col)
			}
			if !ok {
				t.Errorf("record lane %d: column %s gets %T %#v", r.Lane, col, v, v)
			}
		}
	}
}
