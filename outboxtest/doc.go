// Package outboxtest is the store conformance suite: it runs the whole outbox.Store
// contract (see the root package's store.go) against any SQL dialect, on a real server,
// the way Watermill's pubsub/tests runs against every Pub/Sub.
//
// A dialect's test builds a [Harness] over its *sql.DB and calls [Run]:
//
//	func TestConformance(t *testing.T) {
//		db := openTestDB(t) // skips or fails through internal/testenv
//		outboxtest.Run(t, outboxtest.Harness{
//			Name:           "mysql",
//			DB:             db,
//			NewStore:       func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return mysql.New(db, o) },
//			Placeholder:    func(int) string { return "?" },
//			QualifiedTable: mysql.QualifiedTable,
//			...
//		})
//	}
//
// Every rule of the contract is one parallel subtest (Run's groups: Schema, RoundTrip,
// Read, Eligibility, Claim, Ordered, Head, Renew, Complete, Release, Fail, Park, Parked, Stats,
// Lease, Members, Insert, Corrupt, Errors, Arguments, LockedBatch, LaneBatch, Inbox,
// Triggers, Isolation), each in its own tables (a fresh prefix from
// internal/testenv, created through Store.CreateSchema and dropped at the end), so a
// failure names the rule and the dialect, and -run selects one rule. The Inbox group
// requires the store to implement outbox.Inbox (the inbox table, its concurrent
// deliveries, retention and lease).
//
// Every instant the suite gives a store derives from [BaseTime]; only new IDs read the
// wall clock. Boundaries are therefore exact: a row due at now is eligible and one due a
// microsecond later is not; a claim or lease expiring exactly at now has expired.
//
// [Bench] holds the benchmarks every dialect runs (reads, insert-at-commit against a
// hand-written multi-row INSERT baseline, claim+complete); the insert benchmarks report
// their ratio to the baseline measured side by side in the same run.
//
// [NewRecord] and [NewOrderedRecord] build valid records with sane defaults for other
// packages' tests.
package outboxtest
