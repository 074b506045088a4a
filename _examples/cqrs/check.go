package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// onOrderPlaced records the OrderPlaced events the forwarder delivered.
func (a *app) onOrderPlaced(_ context.Context, ev *OrderPlaced) error {
	fmt.Printf("received OrderPlaced    order %s\n", ev.OrderID)
	a.mu.Lock()
	a.placed = append(a.placed, ev.OrderID)
	a.mu.Unlock()
	return nil
}

// onPoisoned records the commands the PoisonQueue set aside.
func (a *app) onPoisoned(msg *message.Message) error {
	var cmd PlaceOrder
	if err := json.Unmarshal(msg.Payload, &cmd); err != nil {
		return err
	}
	fmt.Printf("poisoned PlaceOrder     order %s (%s)\n", cmd.OrderID, msg.Metadata.Get("reason_poisoned"))
	a.mu.Lock()
	a.poisoned = append(a.poisoned, cmd.OrderID)
	a.mu.Unlock()
	return nil
}

// waitFor waits until this run's placed events and poisoned commands are in and the
// outbox table is empty: every committed event was sent, so an event of the failed
// command, had it been committed, would have arrived by then.
func (a *app) waitFor(ctx context.Context, runID string, placed, poisoned int) error {
	for {
		a.mu.Lock()
		p, q := ofRun(a.placed, runID), ofRun(a.poisoned, runID)
		a.mu.Unlock()
		left, err := a.outboxRows(ctx)
		if err != nil {
			return err
		}
		if len(p) >= placed && len(q) >= poisoned && left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out: %d of %d OrderPlaced events, %d of %d poisoned commands, %d outbox rows unsent",
				len(p), placed, len(q), poisoned, left)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// outboxRows counts the rows left in the outbox table.
func (a *app) outboxRows(ctx context.Context) (int, error) {
	var n int
	err := a.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+a.quote(a.store.Options().OutboxTable())).Scan(&n)
	return n, err
}

// verify checks what the run must show: the good orders' rows and events, none of the
// failed command's, and the failed command poisoned (or acked).
func (a *app) verify(runID string, cmds []PlaceOrder, ackErrors bool) error {
	var rows, bad int
	ctx := context.Background()
	if err := a.db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE id LIKE %s", a.orders, a.ph(1)), runID+"-%").Scan(&rows); err != nil {
		return err
	}
	if err := a.db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE id = %s", a.orders, a.ph(1)), cmds[1].OrderID).Scan(&bad); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	placed := slices.Sorted(slices.Values(ofRun(a.placed, runID)))
	var problems []string
	if rows != 2 || bad != 0 {
		problems = append(problems, fmt.Sprintf("%d order rows (%d of the failed command), want 2 (0)", rows, bad))
	}
	if want := []string{cmds[0].OrderID, cmds[2].OrderID}; !slices.Equal(placed, want) {
		problems = append(problems, fmt.Sprintf("OrderPlaced events %v, want %v", placed, want))
	}
	poisoned := ofRun(a.poisoned, runID)
	if !ackErrors && !slices.Equal(poisoned, []string{cmds[1].OrderID}) {
		problems = append(problems, fmt.Sprintf("poisoned %v, want %v", poisoned, cmds[1].OrderID))
	}
	if ackErrors && len(poisoned) != 0 {
		problems = append(problems, fmt.Sprintf("poisoned %v with AckCommandHandlingErrors", poisoned))
	}
	wantAttempts := 3 // Retry's MaxRetries 2: three transactions, all rolled back
	if ackErrors {
		wantAttempts = 1
	}
	if n := a.attempts[cmds[1].OrderID]; n != wantAttempts {
		problems = append(problems, fmt.Sprintf("the failing command ran %d times, want %d", n, wantAttempts))
	}
	if len(problems) > 0 {
		return errors.New("FAIL: " + strings.Join(problems, "; "))
	}
	how := "poisoned after 3 attempts"
	if ackErrors {
		how = "acked by AckCommandHandlingErrors"
	}
	fmt.Printf("OK: cqrs: 2 orders placed, 2 OrderPlaced events delivered; the failing command (%s) left no row and sent no event\n", how)
	return nil
}

func ofRun(ids []string, runID string) []string {
	var out []string
	for _, id := range ids {
		if strings.HasPrefix(id, runID+"-") {
			out = append(out, id)
		}
	}
	return out
}
