package outbox_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
)

func TestIsRetryableThroughWrapping(t *testing.T) {
	driverErr := errors.New("Error 1213: Deadlock found when trying to get lock")
	retryable := &outbox.RetryableError{Err: driverErr}

	for name, err := range map[string]error{
		"direct":        retryable,
		"wrapped":       fmt.Errorf("claim lane 3: %w", retryable),
		"wrapped twice": fmt.Errorf("forwarder: %w", fmt.Errorf("claim: %w", retryable)),
		"joined":        errors.Join(io.EOF, fmt.Errorf("insert: %w", retryable)),
	} {
		if !outbox.IsRetryable(err) {
			t.Errorf("%s: IsRetryable(%v) = false", name, err)
		}
		if !errors.Is(err, driverErr) {
			t.Errorf("%s: the driver error is not reachable through %v", name, err)
		}
	}
	for name, err := range map[string]error{
		"nil":            nil,
		"plain":          driverErr,
		"other sentinel": fmt.Errorf("x: %w", outbox.ErrUnknownOutcome),
	} {
		if outbox.IsRetryable(err) {
			t.Errorf("%s: IsRetryable(%v) = true", name, err)
		}
	}
	if got, want := retryable.Error(), "outbox: retryable: "+driverErr.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestCorruptRowError(t *testing.T) {
	id := outbox.NewID()
	cause := errors.New("headercodec: corrupt headers: unknown version 9 (want 1)")
	var err error = fmt.Errorf("read: %w", &outbox.CorruptRowError{ID: id, Column: "headers", Err: cause})
	var c *outbox.CorruptRowError
	if !errors.As(err, &c) || c.ID != id || c.Column != "headers" {
		t.Fatalf("errors.As failed on %v", err)
	}
	if !errors.Is(err, cause) {
		t.Fatal("cause not reachable")
	}
	for _, part := range []string{id.String(), "corrupt headers", "unknown version 9"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not contain %q", err, part)
		}
	}
}

func TestSentinelsAreDistinct(t *testing.T) {
	all := []error{
		outbox.ErrInvalidOptions, outbox.ErrUnknownOutcome, outbox.ErrClosed, outbox.ErrTxDone,
		outbox.ErrLaneOutOfRange, outbox.ErrNotifierMismatch, outbox.ErrInvalidRecord, outbox.ErrUnhealthy,
		outbox.ErrWakeUnavailable,
	}
	for i, a := range all {
		if !strings.HasPrefix(a.Error(), "outbox: ") {
			t.Errorf("%q lacks the package prefix", a)
		}
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v is %v", a, b)
			}
		}
	}
}
