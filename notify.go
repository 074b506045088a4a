package outbox

import "context"

// Commit tells a forwarder what one committed transaction wrote to its table.
type Commit struct {
	// Lanes lists the distinct lanes that received rows (unordered rows excluded).
	Lanes []int
	// Unordered counts the unordered rows.
	Unordered int
}

// Notifier receives commit notifications from publishers so that a forwarder dispatches
// at once instead of at its next poll: the forwarder itself in the same process, or a
// notifier that carries them to forwarders in other processes (see WakeSource). Notify must not block and
// must not fail the committed transaction: a notification it drops only delays delivery
// until the next poll.
type Notifier interface {
	// NotifierOptions returns the options of the table the notifier serves; a publisher
	// refuses to link a notifier whose options differ from its store's.
	NotifierOptions() Options
	Notify(Commit)
}

// WakeSource delivers the commits of other processes to a forwarder (Config.Wake of
// package forwarder): a PostgreSQL LISTEN connection (postgres.Listener) or a
// subscription to wake-up messages over any Watermill Pub/Sub (package wakeup).
//
// Listen calls n.Notify for every commit it learns of until ctx ends, then returns nil.
// It handles transient failures itself (reconnecting); it returns an error wrapping
// ErrWakeUnavailable when wake-ups cannot work at all (LISTEN refused, a connection
// that delivers no notifications, a subscription that fails), and the forwarder goes on
// by polling alone. A wake-up it loses only delays the rows until the next poll.
type WakeSource interface {
	Listen(ctx context.Context, n Notifier) error
}
