package forwarder

import (
	"context"
	"fmt"
)

// startupGaveUp is the startup check's error when ctx ended while it retried: the last
// real failure (a missing table: outbox.ErrSchemaMissing, with the fix), wrapped
// together with ctx's error, rather than the ctx error a check cut short reports.
func startupGaveUp(ctx context.Context, cause error) error {
	if cause == nil {
		return fmt.Errorf("forwarder: startup check: %w", ctx.Err())
	}
	return fmt.Errorf("forwarder: startup check failed until its context ended (%w): %w", ctx.Err(), cause)
}
