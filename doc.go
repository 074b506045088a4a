// Package outbox is the shared model and store contract of watermill-outbox, a
// transactional outbox for Watermill.
//
// An application writes its business rows and the messages it wants to send in one
// database transaction (package publisher); a forwarder (package forwarder) later claims
// those rows and republishes them to any Watermill publisher, preserving per-key order
// through lanes (package lanes).
//
// This package holds what every part agrees on: the row ([Record]), its identifiers
// ([ID], [Token]), the options that name one outbox table ([Options]), the sentinel
// errors, the [Store] contract that each SQL dialect (packages mysql, postgres,
// sqlserver) implements, and the [Notifier] through which a committing publisher wakes
// a local forwarder. Package outboxtest runs the whole contract against any Store.
//
// All instants are supplied by the caller, so behaviour at every boundary is exact and
// testable; stores keep microsecond precision (SQL Server keeps 100 ns) and return UTC.
package outbox
