// Package batchids is the ID set of a locked batch: the dialects' LockedBatch.Finish
// uses it to ignore IDs that are not in the batch (outbox.LockedBatch's rule).
package batchids
