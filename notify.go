package outbox

// Commit tells a forwarder what one committed transaction wrote to its table.
type Commit struct {
	// Lanes lists the distinct lanes that received rows (unordered rows excluded).
	Lanes []int
	// Unordered counts the unordered rows.
	Unordered int
}

// Notifier receives commit notifications from publishers in the same process so that
// a forwarder dispatches at once instead of at its next poll. Notify must not block and
// must not fail the committed transaction: a notification it drops only delays delivery
// until the next poll.
type Notifier interface {
	// NotifierOptions returns the options of the table the notifier serves; a publisher
	// refuses to link a notifier whose options differ from its store's.
	NotifierOptions() Options
	Notify(Commit)
}
