package outboxtest

import (
	"context"
	"database/sql"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Harness tells the suite how to reach one dialect. Each dialect's test file builds one
// against a real server and calls Run (and Bench).
//
// The suite's raw SQL (corrupting a row, the business table, the benchmark baseline)
// uses the column names of DESIGN.md ("The row") unquoted, the harness's Placeholder and
// QualifiedTable, and otherwise only SQL that all three engines accept.
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
	// QualifiedTable returns the quoted, schema-qualified name of table, an unquoted
	// table name of opts: one of opts.TableNames(), or opts.TablePrefix+"business" (a
	// table the suite creates itself).
	QualifiedTable func(opts outbox.Options, table string) string
	// RowWhere returns the predicate by which the suite's own statements find the row
	// id of lane (outbox.Unordered included) when they lock it: the id is placeholder
	// 1. nil means "id = <placeholder 1>". A dialect whose rows table is keyed by (lane,
	// id) names the lane too, so that the statement locks that row alone.
	RowWhere func(lane int) string
	// DropTables removes the tables of opts (cleanup); nil means DROP TABLE IF EXISTS of
	// opts.TableNames() through QualifiedTable.
	DropTables func(db *sql.DB, opts outbox.Options) error

	// InvalidPrefixes lists table prefixes the dialect must reject at construction, each
	// with a substring the error must contain (naming the problem). The suite also
	// checks the dialect-independent rules of outbox.Options (NUL, invalid UTF-8, Lanes).
	InvalidPrefixes []InvalidPrefix
	// QuotePrefix is a valid prefix holding the dialect's identifier quote character; the
	// suite runs a full round trip through it (no injection, works end to end). The suite
	// prepends a unique "t_<hex>_" part (15 characters) so that runs never collide; keep
	// QuotePrefix short enough for the dialect's length limit with that part added.
	// Required.
	QuotePrefix string

	// OpenInTimeZone, when set, opens another *sql.DB whose session time zone is tz
	// (an IANA name or an offset like "+05:30"); the suite checks instants come back equal
	// and in UTC through it, and that eligibility boundaries stay exact. When the server
	// cannot use a zone (MariaDB without time-zone tables and an IANA name), return an
	// error wrapping errors.ErrUnsupported: the suite skips that zone and says why. The
	// suite closes the returned DB.
	OpenInTimeZone func(tz string) (*sql.DB, error)

	// OpenDB opens a new *sql.DB to the same database as DB with the same settings. The
	// suite builds a store over it and then closes it to check that every method of a
	// store whose database is closed returns an error. When nil the suite uses
	// OpenInTimeZone("+00:00"); when both are nil the closed-database test fails.
	OpenDB func() (*sql.DB, error)

	// OpenConnectorDB, when set, opens a new *sql.DB to the same database through the
	// dialect's connector (postgres.OpenDB, mysql.OpenDB), on which a store records an
	// inbox entry in the round trip of the BEGIN. The Inbox/BeginRecord rules run on it
	// as well as on DB. The suite closes it.
	OpenConnectorDB func() (*sql.DB, error)

	// OpenCountingDB, when set, opens a pool of one connection to the same database
	// whose client requests (writes to the server) are counted: through the dialect's
	// connector when connector is true, else the plain driver. requests returns the
	// count so far. The Inbox/BeginRecordOneRequest rule checks with it that the
	// connector sends the BEGIN and the record as one request, where the plain driver
	// takes two. nil where the dialect has no connector. The suite closes the pool.
	OpenCountingDB func(connector bool) (db *sql.DB, requests func() int64, err error)

	// AuditTriggers creates, on the rows table of opts (opts.OutboxTable()), the AFTER
	// INSERT, UPDATE and DELETE triggers an application's audit would add, each doing DML
	// of its own: it inserts into audit (the quoted, qualified table the suite created
	// with one column, op VARCHAR(16) NOT NULL) at least one row per row the statement
	// changed and, where the engine has statement-level triggers (PostgreSQL, SQL Server), one
	// more row per statement, also when the statement changed no row. A trigger that
	// can report row counts reports them (SQL Server: SET NOCOUNT OFF in its body). The
	// Triggers rules check with it that every count a store returns is the store's own
	// (Complete, Renew, Release, Fail, Park, Requeue, Purge, a lane run's delete) and
	// that lane runs keep flowing. drop removes what the hook made besides the triggers
	// (which go with the table), such as a trigger function; it may be nil. Required:
	// the rules fail without it.
	AuditTriggers func(ctx context.Context, db *sql.DB, opts outbox.Options, audit string) (drop func(ctx context.Context) error, err error)

	// OpenSerializable opens a new *sql.DB to the same database whose sessions run at
	// SERIALIZABLE isolation unless a statement or transaction sets another level (as an
	// application's session setting would: a DSN parameter, a SessionInitSQL). The
	// Isolation rules check with it that the store does not rely on the server's
	// default level. The suite closes it. Required: the rules fail without it.
	OpenSerializable func() (*sql.DB, error)
	// CreateFindIndex, when set, runs the dialect's FindIndexScript for opts on db (the
	// optional message_uuid index of outbox.Finder). The Find rules then also look a
	// UUID up without a time window; without it they check that such a lookup fails
	// with outbox.ErrFindNeedsIndex only.
	CreateFindIndex func(db *sql.DB, opts outbox.Options) error

	// MaxParams is the most bind parameters one statement may carry on this engine
	// (MySQL/MariaDB 65535, PostgreSQL 65535 with pgx, SQL Server 2100 minus a margin).
	// The benchmark baseline chunks its hand-written multi-row INSERT under it. Zero
	// means 2000, safe on every engine.
	MaxParams int
}

// InvalidPrefix is a prefix a dialect rejects, and a substring of the error it gives.
type InvalidPrefix struct {
	Prefix      string
	ErrContains string
}

func (h Harness) maxParams() int {
	if h.MaxParams > 0 {
		return h.MaxParams
	}
	return 2000
}
