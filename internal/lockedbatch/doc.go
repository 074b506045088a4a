// Package lockedbatch is the dialect-independent half of outbox.BatchLocker: Lock opens
// the READ COMMITTED transaction, runs the dialect's locking read in it (again when it is
// chosen as a deadlock victim) and returns the batch; the batch keeps the transaction,
// its end states (finished, rolled back, empty), the checks of FinishParams and the
// filtering of IDs to the batch. Each dialect supplies only its locking read, the
// statements of Finish (Dialect.Finish) and its error translation.
package lockedbatch
