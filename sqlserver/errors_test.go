package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
)

func TestTranslate(t *testing.T) {
	deadlock := mssql.Error{Number: 1205, Message: "Transaction (Process ID 52) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction."}
	lockTimeout := mssql.Error{Number: 1222, Message: "Lock request time out period exceeded."}
	dup := mssql.Error{Number: 2627, Message: "Violation of PRIMARY KEY constraint"}
	for _, c := range []struct {
		name      string
		err       error
		retryable bool
	}{
		{"deadlock", deadlock, true},
		{"lock timeout", lockTimeout, true},
		{"wrapped deadlock", fmt.Errorf("exec: %w", deadlock), true},
		{"pointer", &lockTimeout, true},
		{"deadlock among several errors", mssql.Error{Number: 3621, All: []mssql.Error{deadlock, {Number: 3621}}}, true},
		{"snapshot update conflict", mssql.Error{Number: 3960, Message: "Snapshot isolation transaction aborted due to update conflict."}, true},
		{"duplicate key", dup, false},
		{"other", errors.New("connection reset"), false},
		{"cancelled", context.Canceled, false},
	} {
		err := wrap("claim", c.err)
		if outbox.IsRetryable(err) != c.retryable {
			t.Errorf("%s: IsRetryable(%v) = %v", c.name, err, !c.retryable)
		}
		// mssql.Error holds a slice, so errors.Is cannot compare it: check with As.
		if e, ok := serverError(err); ok {
			if src, _ := serverError(c.err); e.Number != src.Number {
				t.Errorf("%s: reached error %d through the wrap, want %d", c.name, e.Number, src.Number)
			}
		} else if _, isServer := serverError(c.err); isServer {
			t.Errorf("%s: the mssql.Error is not reachable through %v", c.name, err)
		} else if !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap %v", c.name, err, c.err)
		}
	}
	if wrap("x", nil) != nil {
		t.Error("wrap(nil) != nil")
	}
	if err := wrap("x", context.Canceled); !errors.Is(err, context.Canceled) {
		t.Error("cancellation must stay recognisable")
	}
	// Translating twice does not nest RetryableErrors.
	once := translate(deadlock)
	if translate(once) != once {
		t.Error("translate is not idempotent")
	}
}

func TestRetryDeadlockVictims(t *testing.T) {
	deadlock := mssql.Error{Number: 1205}
	calls := 0
	err := retry(context.Background(), func() error {
		calls++
		if calls < 3 {
			return deadlock
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("two deadlocks then success: err %v after %d calls", err, calls)
	}
	calls = 0
	err = retry(context.Background(), func() error { calls++; return deadlock })
	if !outbox.IsRetryable(wrap("x", err)) || calls != 1+deadlockRetries {
		t.Fatalf("persistent deadlock: %v after %d calls, want %d", err, calls, 1+deadlockRetries)
	}
	calls = 0
	_ = retry(context.Background(), func() error { calls++; return mssql.Error{Number: 1222} })
	if calls != 1 {
		t.Fatalf("lock timeouts are not retried inside the store (%d calls)", calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	_ = retry(ctx, func() error { calls++; return deadlock })
	if calls != 1 {
		t.Fatalf("cancelled context: %d calls", calls)
	}
}

// An inbox table without the duplicates column: the error wraps ErrSchemaOutdated and
// names the ALTER; other errors pass unchanged.
func TestInboxSchemaHint(t *testing.T) {
	missing := mssql.Error{Number: 207, Message: "Invalid column name 'duplicates'."}
	err := inboxSchemaHint(fmt.Errorf("exec: %w", missing), "[dbo].[inbox]")
	if !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), "ALTER TABLE [dbo].[inbox] ADD duplicates bigint NOT NULL DEFAULT 0") {
		t.Fatalf("hint = %v", err)
	}
	if e, ok := serverError(err); !ok || e.Number != 207 {
		t.Fatalf("the driver error is not reachable through the hint: %v", err)
	}
	other := mssql.Error{Number: 207, Message: "Invalid column name 'other'."}
	if got := inboxSchemaHint(other, "[dbo].[inbox]"); errors.Is(got, outbox.ErrSchemaOutdated) {
		t.Fatalf("another missing column got the hint: %v", got)
	}
}

// Every transient number of the contract's list comes back as *outbox.RetryableError,
// alone, wrapped, or as one error of a batch; its neighbours do not.
func TestTransientErrorNumbers(t *testing.T) {
	for _, n := range []int32{1204, 1205, 1222, 3960, 4221, 10928, 10929, 40197, 40501, 40613, 49918, 49919, 49920} {
		e := mssql.Error{Number: n, Message: fmt.Sprintf("error %d", n)}
		for _, err := range []error{e, fmt.Errorf("exec: %w", e), mssql.Error{Number: 3621, All: []mssql.Error{{Number: 3621}, e}}} {
			if !outbox.IsRetryable(wrap("x", err)) {
				t.Errorf("%d (%v) is not retryable", n, err)
			}
		}
	}
	for _, n := range []int32{0, 102, 208, 547, 1203, 2627, 2601, 4060, 18456, 40615, 40544} {
		if outbox.IsRetryable(wrap("x", mssql.Error{Number: n})) {
			t.Errorf("%d is retryable; it is not transient", n)
		}
	}
	// Only deadlock victims are run again inside the store: the others may have broken
	// the connection or need the caller's backoff.
	for _, n := range []int32{1204, 40613, 40501} {
		calls := 0
		_ = retry(context.Background(), func() error { calls++; return mssql.Error{Number: n} })
		if calls != 1 {
			t.Errorf("%d was run %d times inside the store", n, calls)
		}
	}
}

// The errors of a BEGIN on a pooled connection that the server closed while it sat
// idle, as go-mssqldb v1.11.2 returns them: tokenProcessor's read of the response
// turns io.EOF into a *net.OpError (Op "Read"); a reset is a *net.OpError of the
// socket. database/sql's driver.ErrBadConn too. Server errors, cancellation and other
// failures are not stale connections.
func TestIsStaleConn(t *testing.T) {
	s := &Store{}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	for _, c := range []struct {
		name  string
		err   error
		stale bool
	}{
		{"EOF read by the driver", &net.OpError{Op: "Read", Err: io.EOF}, true},
		{"connection reset", reset, true},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{"io.EOF", io.EOF, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"wrapped EOF", fmt.Errorf("begin: %w", io.EOF), true},
		{"wrapped OpError", fmt.Errorf("begin: %w", reset), true},
		{"bad conn", driver.ErrBadConn, true},
		{"nil", nil, false},
		{"server error", mssql.Error{Number: 1205}, false},
		{"login failed", mssql.Error{Number: 18456}, false},
		{"cancelled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		{"cancelled read", &net.OpError{Op: "Read", Err: context.Canceled}, false},
		{"other", errors.New("mssql: unknown type"), false},
	} {
		if got := s.IsStaleConn(c.err); got != c.stale {
			t.Errorf("%s: IsStaleConn(%v) = %v, want %v", c.name, c.err, got, c.stale)
		}
	}
}

// Error 1934 (a writer without the SET options of filtered indexes, typically a trigger
// created with QUOTED_IDENTIFIER OFF) names the fix, and the driver's error stays
// reachable.
func TestSetOptionsHint(t *testing.T) {
	e := mssql.Error{Number: 1934, Message: "INSERT failed because the following SET options have incorrect settings: 'QUOTED_IDENTIFIER'."}
	err := wrap("insert", e)
	for _, want := range []string{"QUOTED_IDENTIFIER ON", "uses_quoted_identifier = 0", "recreate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got, ok := serverError(err); !ok || got.Number != 1934 {
		t.Fatalf("the driver error is not reachable: %v", err)
	}
	if outbox.IsRetryable(err) {
		t.Fatal("1934 is not transient")
	}
}

// TestSchemaMissing: error 208 (invalid object name) from any statement of the store
// becomes outbox.ErrSchemaMissing naming the fix with the store's schema and prefix; no
// server here, so the driver's error is built as go-mssqldb returns it.
func TestSchemaMissing(t *testing.T) {
	db, err := sql.Open("sqlserver", "sqlserver://127.0.0.1:1?database=none") // never connected
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(db, outbox.Options{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		t.Fatal(err)
	}
	missing := mssql.Error{Number: 208, Message: "Invalid object name 'messaging.orders_outbox'."}
	for _, in := range []error{missing, fmt.Errorf("exec: %w", missing), mssql.Error{Number: 16945, All: []mssql.Error{{Number: 16945}, missing}}} {
		got := s.schemaErr(in)
		if !errors.Is(got, outbox.ErrSchemaMissing) {
			t.Fatalf("%v: not ErrSchemaMissing", in)
		}
		for _, want := range []string{"store.CreateSchema(ctx)", `outboxctl schema apply -dialect sqlserver -schema "messaging" -prefix "orders_"`, "orders_inbox_lease"} {
			if !strings.Contains(got.Error(), want) {
				t.Errorf("%q lacks %q", got, want)
			}
		}
	}
	other := mssql.Error{Number: 207, Message: "Invalid column name 'x'."}
	if got := s.schemaErr(other); errors.Is(got, outbox.ErrSchemaMissing) {
		t.Fatalf("207 became ErrSchemaMissing: %v", got)
	}
}
