package postgres

import (
	"context"
	"fmt"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
)

// MaxIdentifierBytes is PostgreSQL's identifier limit (NAMEDATALEN-1). Longer names are
// silently truncated by the server, so two prefixes could name the same tables: we refuse
// them instead.
const MaxIdentifierBytes = 63

// Suffixes of every name the DDL generates from the table prefix. The longest one decides
// how long a prefix may be (MaxTablePrefixBytes).
const (
	suffixOutbox    = "outbox"
	suffixLanes     = "outbox_lanes"
	suffixNodes     = "outbox_nodes"
	suffixLaneIx    = "outbox_lseq_ix"    // head of one lane, in seq order
	suffixDueIx     = "outbox_due_ix"     // unordered due rows
	suffixParkedIx  = "outbox_parked_ix"  // parked rows by id (ListParked, Purge, Requeue)
	suffixParkKeyIx = "outbox_parkkey_ix" // parked rows by key (HoldParkedKeys, key filters)
	suffixInbox     = "inbox"             // message UUIDs consumers applied
	suffixInboxAge  = "inbox_age_ix"      // inbox entries by processed_at (retention)
	suffixInboxLock = "inbox_lease"       // the inbox's retention lease
)

var generatedSuffixes = []string{
	suffixOutbox, suffixLanes, suffixNodes, suffixLaneIx, suffixDueIx, suffixParkedIx, suffixParkKeyIx,
	suffixInbox, suffixInboxAge, suffixInboxLock,
}

// MaxTablePrefixBytes is the longest table prefix, in bytes, whose generated table and
// index names all fit in MaxIdentifierBytes: the longest suffix is suffixParkKeyIx
// (TestMaxTablePrefixBytes checks it against every generated suffix).
const MaxTablePrefixBytes = MaxIdentifierBytes - len(suffixParkKeyIx)

// quoteIdent is the one place identifiers are quoted: double quotes, embedded quotes
// doubled. Options validation has already rejected NUL and invalid UTF-8.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// names holds every identifier of one outbox, quoted (tables schema-qualified when a
// schema is given; index names are never qualified: an index lives in its table's schema).
type names struct {
	schema                         string // quoted, "" when none
	outbox, lanes, nodes           string // quoted, qualified
	laneIx, dueIx, parkedIx, keyIx string // quoted
	inbox, inboxLease              string // quoted, qualified
	inboxAgeIx                     string // quoted
}

// validateOptions applies defaults, the dialect-independent rules and PostgreSQL's
// identifier limit. Errors wrap outbox.ErrInvalidOptions and name the field.
func validateOptions(opts outbox.Options) (outbox.Options, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return opts, err
	}
	if n := len(opts.Schema); n > MaxIdentifierBytes {
		return opts, outbox.InvalidOption("Schema", "is %d bytes; PostgreSQL identifiers are at most %d bytes", n, MaxIdentifierBytes)
	}
	if n := len(opts.TablePrefix); n > MaxTablePrefixBytes {
		return opts, outbox.InvalidOption("TablePrefix",
			"is %d bytes; at most %d bytes (PostgreSQL identifiers are at most %d bytes and the longest generated name adds %d)",
			n, MaxTablePrefixBytes, MaxIdentifierBytes, MaxIdentifierBytes-MaxTablePrefixBytes)
	}
	return opts, nil
}

func newNames(opts outbox.Options) names {
	n := names{}
	qualify := func(table string) string { return quoteIdent(table) }
	if opts.Schema != "" {
		n.schema = quoteIdent(opts.Schema)
		qualify = func(table string) string { return n.schema + "." + quoteIdent(table) }
	}
	p := opts.TablePrefix
	n.outbox = qualify(p + suffixOutbox)
	n.lanes = qualify(p + suffixLanes)
	n.nodes = qualify(p + suffixNodes)
	n.laneIx = quoteIdent(p + suffixLaneIx)
	n.dueIx = quoteIdent(p + suffixDueIx)
	n.parkedIx = quoteIdent(p + suffixParkedIx)
	n.keyIx = quoteIdent(p + suffixParkKeyIx)
	n.inbox = qualify(p + suffixInbox)
	n.inboxLease = qualify(p + suffixInboxLock)
	n.inboxAgeIx = quoteIdent(p + suffixInboxAge)
	return n
}

// QualifiedTable returns the quoted, schema-qualified name of table (an unquoted name such
// as opts.OutboxTable()) for raw SQL against the outbox's schema.
func QualifiedTable(opts outbox.Options, table string) string {
	if opts.Schema == "" {
		return quoteIdent(table)
	}
	return quoteIdent(opts.Schema) + "." + quoteIdent(table)
}

// checkSeq fails with an error wrapping outbox.ErrSchemaOutdated when the rows table
// exists without the seq column (the schema before 2026-12-08): its lanes could not be
// read in commit order. The forwarder's startup check (MaxLane) and CreateSchema run it;
// a missing table is left to the statement that needs it.
func (s *Store) checkSeq(ctx context.Context) error {
	const query = `SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute ` +
		`WHERE attrelid = to_regclass($1) AND attname = 'seq' AND NOT attisdropped)`
	var exists, hasSeq bool
	if err := s.db.QueryRowContext(ctx, query, s.q.n.outbox).Scan(&exists, &hasSeq); err != nil {
		return fmt.Errorf("check the rows table: %w", err)
	}
	if exists && !hasSeq {
		return fmt.Errorf("%w: table %s has no seq column (the schema before 2026-12-08), so its lanes could not follow commit order; "+
			"run the statements of postgres.MigrateScript (outboxctl schema migrate -dialect postgres -prefix %q prints them)",
			outbox.ErrSchemaOutdated, s.q.n.outbox, s.opts.TablePrefix)
	}
	return nil
}

// MigrateScript returns the statements, in one transaction, that bring a rows table of
// the previous schema (no seq column) to this one: seq is added and numbered in id order
// (the lanes' order until then), becomes an identity continuing after the greatest
// number, and the lanes' index is rebuilt on (lane, seq). The table is locked for the
// duration; writers of the previous version may go on afterwards (the identity numbers
// their rows), forwarders of the previous version must be stopped first.
func MigrateScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	n := newNames(opts)
	t := n.outbox
	oldIx := quoteIdent(opts.TablePrefix + "outbox_lane_ix")
	if n.schema != "" {
		oldIx = n.schema + "." + oldIx
	}
	lit := "'" + strings.ReplaceAll(t, "'", "''") + "'"
	return strings.Join([]string{
		"BEGIN",
		"LOCK TABLE " + t + " IN ACCESS EXCLUSIVE MODE",
		"ALTER TABLE " + t + " ADD COLUMN seq bigint",
		"UPDATE " + t + " AS o SET seq = r.n FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM " + t + ") AS r WHERE r.id = o.id",
		"ALTER TABLE " + t + " ALTER COLUMN seq SET NOT NULL",
		"ALTER TABLE " + t + " ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY",
		"SELECT setval(pg_get_serial_sequence(" + lit + ", 'seq'), (SELECT COALESCE(max(seq), 0) + 1 FROM " + t + "), false)",
		"DROP INDEX IF EXISTS " + oldIx,
		fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (lane, seq) WHERE status = 'pending' AND lane IS NOT NULL", n.laneIx, t),
		"COMMIT",
	}, ";\n") + ";\n", nil
}

// zeroBytes16 is the zero id / zero token as a bytea expression (independent of
// standard_conforming_strings).
const zeroBytes16 = `decode('00000000000000000000000000000000', 'hex')`

// CreateScript returns idempotent DDL for the outbox of opts: the schema (only when
// opts.Schema is set), the rows table, the lane-lease table, the heartbeat table, the
// indexes of the hot reads, and the inbox tables (entries and retention lease). It can run any number of times; it never alters an existing
// table. Invalid options give an error wrapping outbox.ErrInvalidOptions.
func CreateScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	return createScript(newNames(opts)), nil
}

func createScript(n names) string {
	var b strings.Builder
	if n.schema != "" {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", n.schema)
	}
	fmt.Fprintf(&b, `CREATE TABLE IF NOT EXISTS %[1]s (
    id               bytea       NOT NULL PRIMARY KEY
                     CHECK (octet_length(id) = 16 AND id <> %[2]s),
    message_uuid     text        NOT NULL DEFAULT '',
    lane             integer     NULL CHECK (lane >= 0),
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    ordering_key     text        NULL,
    transport        text        NOT NULL DEFAULT '',
    destination      text        NOT NULL,
    message_type     text        NULL,
    headers          bytea       NOT NULL CHECK (octet_length(headers) >= 8),
    body             bytea       NOT NULL,
    tenant_id        text        NULL,
    created_at       timestamptz NOT NULL,
    deliver_at       timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error       text        NULL,
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'parked')),
    claim_token      bytea       NULL,
    claim_expires_at timestamptz NULL,
    CHECK ((claim_token IS NULL AND claim_expires_at IS NULL)
        OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL
            AND octet_length(claim_token) = 16 AND claim_token <> %[2]s))
) WITH (fillfactor = 90);
`, n.outbox, zeroBytes16)
	// fillfactor leaves room on each page so that renewals (which touch no indexed
	// column) stay HOT updates.

	// seq is a lane's order: the identity's next value, taken when the publisher inserts
	// the row at its commit (after every lock the transaction waited for). A transaction
	// that began after another one committed, or waited for its lock, inserts after it
	// and gets greater values, whatever the writers' clocks; the id, made by the writer
	// at Publish, would not (two writers in one millisecond order by chance). The
	// identity's sequence keeps the default CACHE 1: a session caching values would hand
	// out old ones after others' newer ones.
	//
	// Head of one lane: pending rows of the lane in seq order.
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (lane, seq) WHERE status = 'pending' AND lane IS NOT NULL;\n", n.laneIx, n.outbox)
	// Unordered due rows: pending rows without a lane in id order; deliver_at is a filter.
	// (With deliver_at as a second column the planner preferred filtering the primary key
	// over the whole table: TestExplainHotReads.)
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (id) WHERE status = 'pending' AND lane IS NULL;\n", n.dueIx, n.outbox)
	// Parked rows are few; these keep parked listings and the park-the-key check off the
	// pending rows.
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (id) WHERE status = 'parked';\n", n.parkedIx, n.outbox)
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (ordering_key, id) WHERE status = 'parked';\n", n.keyIx, n.outbox)
	// No index on claim_token: token claims are renewed, completed and released by id
	// (a Renew or Release by token alone scans the table), and a claim UPDATE that
	// touches no indexed column can stay a HOT update.

	fmt.Fprintf(&b, `CREATE TABLE IF NOT EXISTS %s (
    lane       integer     NOT NULL PRIMARY KEY CHECK (lane >= 0),
    owner      text        NOT NULL,
    token      bytea       NOT NULL CHECK (octet_length(token) = 16 AND token <> %s),
    expires_at timestamptz NOT NULL
);
`, n.lanes, zeroBytes16)
	fmt.Fprintf(&b, `CREATE TABLE IF NOT EXISTS %s (
    owner      text        NOT NULL PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
`, n.nodes)
	// The inbox: recording is an insert into the primary key (a duplicate adds one to
	// its entry's duplicates: ON CONFLICT DO UPDATE); COLLATE "C" compares and sorts
	// bytes, as Go does. The age index serves retention.
	fmt.Fprintf(&b, `CREATE TABLE IF NOT EXISTS %s (
    consumer     text COLLATE "C" NOT NULL,
    message_uuid text COLLATE "C" NOT NULL,
    processed_at timestamptz NOT NULL,
    duplicates   bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, message_uuid)
);
`, n.inbox)
	fmt.Fprintf(&b, "CREATE INDEX IF NOT EXISTS %s ON %s (processed_at);\n", n.inboxAgeIx, n.inbox)
	fmt.Fprintf(&b, `CREATE TABLE IF NOT EXISTS %s (
    name       text        NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    token      bytea       NOT NULL CHECK (octet_length(token) = 16 AND token <> %s),
    expires_at timestamptz NOT NULL
);
`, n.inboxLease, zeroBytes16)
	return b.String()
}
