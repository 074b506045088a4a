package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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
