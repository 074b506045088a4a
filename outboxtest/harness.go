package outboxtest

import (
	"database/sql"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Harness tells the suite how to reach one dialect. Each dialect's test file builds one
// against a real server and calls Run (and Bench).
type Harness struct {
	// Name of the dialect, for messages ("mysql", "postgres", "sqlserver").
	Name string
	// DB is the database the suite works in. Each test makes its own tables with a
	// fresh prefix (and drops them at the end), so tests run in parallel.
	DB *sql.DB
	// NewStore builds a store over DB for opts. It must validate opts like the dialect's
	// public constructor does (the suite checks the dialect's prefix rules through it).
	NewStore func(db *sql.DB, opts outbox.Options) (outbox.Store, error)
	// Placeholder returns the dialect's n-th (1-based) bind parameter: "?", "$1", "@p1".
	Placeholder func(n int) string
	// QualifiedTable returns the quoted, schema-qualified name of opts' outbox table (and
	// of its other tables when given their unquoted name) for the suite's raw SQL.
	QualifiedTable func(opts outbox.Options, table string) string
	// DropTables removes the tables of opts (cleanup); nil means DROP TABLE of the three
	// names through QualifiedTable.
	DropTables func(db *sql.DB, opts outbox.Options) error

	// InvalidPrefixes lists table prefixes the dialect must reject at construction, each
	// with a substring the error must contain (naming the problem).
	InvalidPrefixes []InvalidPrefix
	// QuotePrefix is a valid prefix holding the dialect's identifier quote character; the
	// suite runs a full round trip through it (no injection, works end to end).
	QuotePrefix string

	// OpenInTimeZone, when set, opens another *sql.DB whose session time zone is tz
	// (an IANA name or an offset like "+05:30"); the suite checks instants come back equal
	// and in UTC through it.
	OpenInTimeZone func(tz string) (*sql.DB, error)
}

// InvalidPrefix is a prefix a dialect rejects, and a substring of the error it gives.
type InvalidPrefix struct {
	Prefix      string
	ErrContains string
}
