package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
)

// paramsDriver records the statements and arguments a store hands to database/sql,
// exactly as given (its connections accept every value unconverted, as go-mssqldb's
// CheckNamedValue does for its own types). It answers a counted statement with one row
// holding 1 (its count), other queries with no rows, and every Exec with nothing. It is no stand-in for
// SQL Server: it only shows what would be sent.
type paramsDriver struct {
	mu    sync.Mutex
	calls []paramsCall
}

type paramsCall struct {
	query string
	args  []driver.NamedValue
}

func (d *paramsDriver) Open(string) (driver.Conn, error) { return &paramsConn{d: d}, nil }

func (d *paramsDriver) record(query string, args []driver.NamedValue) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, paramsCall{query, args})
}

type paramsConn struct{ d *paramsDriver }

func (c *paramsConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (c *paramsConn) Close() error                        { return nil }
func (c *paramsConn) Begin() (driver.Tx, error)           { return c, nil }
func (c *paramsConn) Commit() error                       { return nil }
func (c *paramsConn) Rollback() error                     { return nil }
func (c *paramsConn) CheckNamedValue(*driver.NamedValue) error {
	return nil
}

func (c *paramsConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.d.record(query, args)
	return driver.RowsAffected(1), nil
}

func (c *paramsConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.d.record(query, args)
	return &oneRow{done: !strings.Contains(query, "@changed")}, nil
}

type oneRow struct{ done bool }

func (r *oneRow) Columns() []string { return []string{"n"} }
func (r *oneRow) Close() error      { return nil }
func (r *oneRow) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = int64(1)
	return nil
}

// paramsStore returns a store over a fresh paramsDriver pool, and the driver.
func paramsStore(t *testing.T) (*Store, *paramsDriver) {
	t.Helper()
	d := &paramsDriver{}
	db := sql.OpenDB(paramsConnector{d})
	t.Cleanup(func() { db.Close() })
	s, err := New(db, outbox.Options{Lanes: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s, d
}

type paramsConnector struct{ d *paramsDriver }

func (c paramsConnector) Connect(context.Context) (driver.Conn, error) {
	return &paramsConn{d: c.d}, nil
}
func (c paramsConnector) Driver() driver.Driver { return c.d }

// fixedDecl returns the declaration go-mssqldb v1.11.2 gives v (Stmt.makeParam,
// makeParamExtra and makeDecl), or an error naming a type whose declaration follows
// the value's length (a string as nvarchar(n), a []byte other than an id or token as
// varbinary(n)) or is unknown here.
func fixedDecl(v any) (string, error) {
	switch v := v.(type) {
	case mssql.NVarCharMax:
		return "nvarchar(max)", nil
	case mssql.VarCharMax:
		return "varchar(max)", nil
	case []byte:
		if len(v) == 16 {
			return "varbinary(16)", nil
		}
		return "", fmt.Errorf("[]byte of %d bytes is declared varbinary(%d)", len(v), len(v))
	case string:
		return "", fmt.Errorf("string %q is declared nvarchar(%d)", v, len([]rune(v)))
	case time.Time:
		return "datetimeoffset(7)", nil
	case int32, sql.NullInt32:
		return "int", nil
	case int64:
		return "bigint", nil
	case bool:
		return "bit", nil
	}
	return "", fmt.Errorf("unexpected %T %#v", v, v)
}

// Every statement the store sends declares its parameters at fixed types, whatever the
// values' lengths: SQL Server caches a plan per parameter declaration list, so a
// declaration following each string's or payload's length (go-mssqldb's default for
// string and []byte) would compile a plan per call. The same calls with short and long
// values must send the same declarations.
func TestParametersHaveFixedTypes(t *testing.T) {
	decls := map[string]string{} // statement -> declarations of its first call
	for _, size := range []int{1, 200} {
		s, d := paramsStore(t)
		runEveryWrite(t, s, strings.Repeat("v", size), size)
		for _, c := range d.calls {
			var got []string
			for _, a := range c.args {
				decl, err := fixedDecl(a.Value)
				if err != nil {
					t.Errorf("@%s of %.80s...: %v", a.Name, c.query, err)
				}
				got = append(got, "@"+a.Name+" "+decl)
			}
			key, list := c.query, strings.Join(got, ", ")
			if prev, ok := decls[key]; ok && prev != list {
				t.Errorf("declarations vary with the values' lengths for %.80s...:\n%s\n%s", key, prev, list)
			}
			decls[key] = list
		}
	}
	if len(decls) != 13 {
		t.Fatalf("%d statements recorded, want the 13 of runEveryWrite", len(decls))
	}
}

// runEveryWrite calls every store method that sends strings or byte strings, with
// strings v and payloads of size bytes.
func runEveryWrite(t *testing.T, s *Store, v string, size int) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tok, id := outbox.NewToken(), outbox.NewID()
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	must("begin", err)
	recs := []outbox.Record{validRecord(), validRecord()}
	recs[0].Body = []byte(strings.Repeat("b", size))
	recs[1].Lane, recs[1].OrderingKey, recs[1].MessageType, recs[1].TenantID, recs[1].MessageUUID = 2, v, v, v, v
	must("insert", s.Insert(ctx, tx, recs))
	_, err = s.RecordInbox(ctx, tx, v, v, now)
	must("record inbox", err)
	must("commit", tx.Commit())
	_, err = s.Fail(ctx, outbox.FailParams{ID: id, Token: tok, Now: now, Error: v, Lane: outbox.Unordered})
	must("fail", err)
	_, err = s.Fail(ctx, outbox.FailParams{ID: id, Now: now, Error: v, Lane: 1, Lease: tok})
	must("fail head row", err)
	_, err = s.Park(ctx, id, v, now)
	must("park", err)
	_, err = s.Requeue(ctx, outbox.ParkedFilter{OrderingKey: &v})
	must("requeue key", err)
	_, err = s.Purge(ctx, outbox.ParkedFilter{OrderingKey: &v})
	must("purge key", err)
	_, err = s.ListParked(ctx, outbox.ParkedQuery{Limit: 10, OrderingKey: &v})
	must("list parked key", err)
	_, err = s.AcquireLease(ctx, outbox.LeaseParams{Lane: 1, Owner: v, Token: tok, TTL: time.Minute})
	must("acquire lease", err)
	must("heartbeat", s.Heartbeat(ctx, v, time.Minute))
	must("leave", s.Leave(ctx, v))
	_, err = s.AcquireInboxLease(ctx, outbox.InboxLeaseParams{Owner: v, Token: tok, Now: now, Until: now.Add(time.Minute)})
	must("acquire inbox lease", err)
	_, err = s.PruneInbox(ctx, now, 10)
	must("prune inbox", err)
}

// The parameterised INSERT turns the fixed-type values back into the row: headers and
// body from hex digits, empty optional strings to NULL, checked on the SQL text and on
// the values insertParams makes.
func TestInsertParams(t *testing.T) {
	r := validRecord()
	r.Body = nil
	args := insertParams(nil, &r)
	if len(args) != len(insertCols) {
		t.Fatalf("%d values for %d columns", len(args), len(insertCols))
	}
	if got := args[8].(mssql.VarCharMax); got != "" {
		t.Fatalf("empty body sent as %q, want no hex digits", got)
	}
	if got := args[7].(mssql.VarCharMax); string(got) != hex.EncodeToString(r.Headers) {
		t.Fatalf("headers sent as %q", got)
	}
	if lane := args[2].(sql.NullInt32); lane.Valid {
		t.Fatalf("unordered lane sent as %v, want a typed NULL", lane)
	}
	r.Lane = 3
	if lane := insertParams(nil, &r)[2].(sql.NullInt32); !lane.Valid || lane.Int32 != 3 {
		t.Fatalf("lane 3 sent as %v", lane)
	}
	q := newQueries(newNames(outbox.Options{}))
	want := "(@p1, @p2, @p3, CASE WHEN DATALENGTH(@p4) > 0 THEN @p4 END, @p5, @p6, CASE WHEN DATALENGTH(@p7) > 0 THEN @p7 END, " +
		"CONVERT(varbinary(max), @p8, 2), CONVERT(varbinary(max), @p9, 2), CASE WHEN DATALENGTH(@p10) > 0 THEN @p10 END, @p11, @p12)"
	if got := q.insert(1); !strings.HasSuffix(got, " VALUES "+want) {
		t.Fatalf("insert(1) = %s\nwant its values %s", got, want)
	}
}
