package testenv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

type errRecorder struct {
	testing.TB
	msgs []string
}

func (r *errRecorder) Helper() {}
func (r *errRecorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, format)
	_ = args
}

// A cleanup that ignores its context fails the test after timeout + CleanupGrace
// instead of blocking; one that honours it returns its error; one that succeeds is silent.
func TestBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("short: waits CleanupGrace")
	}
	r := &errRecorder{TB: t}
	start := time.Now()
	block := make(chan struct{})
	defer close(block)
	testenv.Bounded(r, "stuck", 10*time.Millisecond, func(context.Context) error { <-block; return nil })
	if len(r.msgs) != 1 || !strings.Contains(r.msgs[0], "did not return") {
		t.Fatalf("stuck cleanup reported %q", r.msgs)
	}
	if d := time.Since(start); d > testenv.CleanupGrace+2*time.Second {
		t.Fatalf("stuck cleanup took %s", d)
	}

	r = &errRecorder{TB: t}
	testenv.Bounded(r, "cancelled", 10*time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if len(r.msgs) != 1 || strings.Contains(r.msgs[0], "did not return") {
		t.Fatalf("cancelled cleanup reported %q", r.msgs)
	}

	r = &errRecorder{TB: t}
	testenv.Bounded(r, "fine", time.Second, func(context.Context) error { return nil })
	testenv.Bounded(r, "nil error", time.Second, func(context.Context) error { return errors.Join() })
	if len(r.msgs) != 0 {
		t.Fatalf("successful cleanups reported %q", r.msgs)
	}
}
