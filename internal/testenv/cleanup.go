package testenv

import (
	"context"
	"testing"
	"time"
)

// CleanupTimeout bounds every cleanup that talks to a server: its context ends after
// this long, and a cleanup that has not returned CleanupGrace later fails the test.
const (
	CleanupTimeout = 30 * time.Second
	CleanupGrace   = 5 * time.Second
)

// Cleanup registers fn as a cleanup of tb that runs with a context ending after
// CleanupTimeout. An error from fn fails the test, naming what. A cleanup stuck past
// its deadline (a driver that ignores cancellation, a statement queued behind a lock
// that a leaked transaction holds) fails the test with a message CleanupGrace after
// the deadline instead of hanging the package; its goroutine is left behind.
func Cleanup(tb testing.TB, what string, fn func(ctx context.Context) error) {
	tb.Helper()
	tb.Cleanup(func() { Bounded(tb, what, CleanupTimeout, fn) })
}

// Bounded runs fn with a context ending after timeout and waits for it at most
// CleanupGrace longer; an error or an overrun fails tb with a message naming what.
func Bounded(tb testing.TB, what string, timeout time.Duration, fn func(ctx context.Context) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			tb.Errorf("cleanup: %s: %v", what, err)
		}
	case <-time.After(timeout + CleanupGrace):
		tb.Errorf("cleanup: %s did not return within %s of its %s deadline; abandoned (a transaction or lock left open by the test?)",
			what, CleanupGrace, timeout)
	}
}
