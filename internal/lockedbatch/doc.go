// Package lockedbatch is the dialect-independent half of outbox.LockedBatch: the open
// transaction, its end states (finished, rolled back, empty), the checks of
// FinishParams and the filtering of IDs to the batch. Each dialect supplies only the
// statements of Finish (Dialect.Finish) and its error translation.
package lockedbatch
