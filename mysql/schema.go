package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
)

const (
	// MaxIdentifierChars is MySQL's identifier limit (characters, not bytes).
	MaxIdentifierChars = 64
	// MaxTablePrefixChars is the longest table prefix: the longest table name adds 12
	// characters ("outbox_lanes"), and MySQL 8 names the rows table's unnamed CHECK
	// constraints "<prefix>outbox_chk_<n>", which must fit in 64 characters too.
	MaxTablePrefixChars = 52
)

// Column limits (characters for VARCHAR, bytes for VARBINARY). Insert checks them so a
// record that does not fit fails with outbox.ErrInvalidRecord, never truncated.
const (
	maxMessageUUID = 255
	maxOrderingKey = 1024 // bytes: VARBINARY compares exactly (no PAD SPACE collation)
	maxTransport   = 255
	maxDestination = 1024
	maxMessageType = 255
	maxTenantID    = 255
	maxOwner       = 255
	maxLastError   = 65535 // bytes (TEXT)
)

// quoteIdent is the one place identifiers are quoted: backticks, embedded backticks
// doubled. Validation has already rejected NUL, invalid UTF-8 and non-BMP characters.
func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}

// QualifiedTable returns the quoted, database-qualified name of table (an unquoted name
// such as opts.OutboxTable()) for raw SQL against the outbox's database.
func QualifiedTable(opts outbox.Options, table string) string {
	if opts.Schema == "" {
		return quoteIdent(table)
	}
	return quoteIdent(opts.Schema) + "." + quoteIdent(table)
}

// validateOptions applies defaults, the dialect-independent rules and MySQL's identifier
// rules. Errors wrap outbox.ErrInvalidOptions and name the field.
func validateOptions(opts outbox.Options) (outbox.Options, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return opts, err
	}
	if err := checkIdentifier("Schema", opts.Schema, MaxIdentifierChars); err != nil {
		return opts, err
	}
	if strings.HasSuffix(opts.Schema, " ") {
		return opts, outbox.InvalidOption("Schema", "ends with a space, which MySQL does not allow in a database name")
	}
	return opts, checkIdentifier("TablePrefix", opts.TablePrefix, MaxTablePrefixChars)
}

// checkIdentifier enforces what MySQL accepts in a quoted identifier: BMP characters
// only (U+0001..U+FFFF) and at most max characters.
func checkIdentifier(field, s string, max int) error {
	n := 0
	for _, r := range s {
		n++
		if r > 0xFFFF { // MySQL's utf8mb4 identifiers stop at the BMP
			return outbox.InvalidOption(field, "contains the supplementary character %U; MySQL identifiers allow only BMP characters (U+0001..U+FFFF)", r)
		}
	}
	if n > max {
		return outbox.InvalidOption(field, "is %d characters long; at most %d characters are allowed", n, max)
	}
	return nil
}

// names holds the quoted identifiers of one outbox.
type names struct {
	outbox, lanes, nodes string // quoted and qualified
	inbox, inboxLease    string // quoted and qualified
}

func newNames(opts outbox.Options) names {
	return names{
		outbox: QualifiedTable(opts, opts.OutboxTable()),
		lanes:  QualifiedTable(opts, opts.LanesTable()),
		nodes:  QualifiedTable(opts, opts.NodesTable()),

		inbox:      QualifiedTable(opts, opts.InboxTable()),
		inboxLease: QualifiedTable(opts, opts.InboxLeaseTable()),
	}
}

// zero16 is the zero id / token as a binary literal.
const zero16 = "X'00000000000000000000000000000000'"

// CreateScript returns idempotent DDL for the outbox of opts: the rows table, the
// lane-lease table, the heartbeat table and the inbox tables (entries and retention
// lease), with their indexes and CHECK constraints.
// Statements end with ";" and a newline; it never creates a database and never alters an
// existing table. Invalid options give an error wrapping outbox.ErrInvalidOptions.
func CreateScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	return strings.Join(createStatements(newNames(opts)), ";\n") + ";\n", nil
}

// createStatements is the DDL, one statement per element (CreateSchema runs them one by
// one, so the DSN needs no multiStatements).
func createStatements(n names) []string {
	// seq is a lane's order: AUTO_INCREMENT numbers a row of a lane when the publisher
	// inserts it, at its commit, after every lock its transaction waited for. A
	// transaction that began after another one committed, or waited for its lock,
	// inserts after it and gets greater numbers, whatever the writers' clocks (the id,
	// made by the writer at Publish, would not: two writers in one millisecond order by
	// chance). Unordered rows store seq -1 and stay in id order.
	//
	// InnoDB keeps the rows in the order of the primary key (lane, seq, id), which
	// serves the head of one lane (lane = ? ORDER BY seq) and the unordered due read
	// (lane = -1 AND seq = -1, in id order, due and claim tests filtered on the way) as
	// range reads of the rows themselves. ix_seq is there because InnoDB requires an
	// AUTO_INCREMENT column to lead an index; it is the one secondary index, appended
	// to in order. Unordered rows hold lane -1 (no NULL in a primary key); a parked row
	// holds -3 - lane (parkedLane), below -1, so parked rows sit apart from the pending
	// ones: listings, counts and MAX(lane) read their own range. Every write names the
	// lane of its rows (the store contract passes it) and their seqs where the caller
	// read them (a lane run's delete, a head row's failure): an unordered row is a point
	// (lane -1, seq -1, id); a lane's row without its seq (token claims of a lane, Park
	// by id alone) is found by walking its lane. No index on claim_token: token claims
	// are renewed, completed and released within their lane. deliver_at defaults to created_at, so
	// an INSERT of rows due at once leaves it out (see Insert).
	outboxTable := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    id               BINARY(16)      NOT NULL,
    message_uuid     VARCHAR(%[3]d)    NOT NULL DEFAULT '',
    lane             INT             NOT NULL DEFAULT -1,
    seq              BIGINT          NOT NULL AUTO_INCREMENT,
    ordering_key     VARBINARY(%[4]d) NULL,
    transport        VARCHAR(%[5]d)    NOT NULL DEFAULT '',
    destination      VARCHAR(%[6]d)   NOT NULL,
    message_type     VARCHAR(%[7]d)    NULL,
    headers          LONGBLOB        NOT NULL,
    body             LONGBLOB        NOT NULL,
    tenant_id        VARCHAR(%[8]d)    NULL,
    created_at       DATETIME(6)     NOT NULL,
    deliver_at       DATETIME(6)     NOT NULL DEFAULT (created_at),
    attempts         INT             NOT NULL DEFAULT 0,
    last_error       TEXT            NULL,
    status           VARCHAR(16)     NOT NULL DEFAULT 'pending',
    claim_token      BINARY(16)      NULL,
    claim_expires_at DATETIME(6)     NULL,
    PRIMARY KEY (lane, seq, id),
    KEY ix_seq (seq),
    CHECK (id <> %[2]s),
    CHECK (LENGTH(headers) >= 8),
    CHECK (attempts >= 0),
    CHECK ((status = 'pending' AND lane >= -1) OR (status = 'parked' AND lane < -1)),
    CHECK ((claim_token IS NULL AND claim_expires_at IS NULL)
        OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND claim_token <> %[2]s))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		n.outbox, zero16, maxMessageUUID, maxOrderingKey, maxTransport, maxDestination, maxMessageType, maxTenantID)

	// No CHECK constraints here: MySQL 8 names them "<table>_chk_<n>", which for the
	// longest table name would pass 64 characters; the store validates lane and token.
	// renewals counts the renewals of the current token: it makes every renewal change
	// the row, so that affected rows tells a live lease apart without clientFoundRows.
	lanesTable := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    lane       INT          NOT NULL,
    owner      VARCHAR(%[2]d) NOT NULL DEFAULT '',
    token      BINARY(16)   NOT NULL,
    expires_at DATETIME(6)  NOT NULL,
    renewals   BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (lane)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, n.lanes, maxOwner)

	nodesTable := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    owner      VARCHAR(%[2]d) NOT NULL,
    expires_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (owner)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, n.nodes, maxOwner)

	return []string{outboxTable, lanesTable, nodesTable, inboxTable(n), inboxLeaseTable(n)}
}

// inboxTable: one row per (consumer, message UUID) applied. Both are VARBINARY so that
// they compare byte for byte (utf8mb4_bin pads spaces). Recording is an insert into the
// primary key (a duplicate adds one to its entry's duplicates); ix_processed_at serves
// retention (oldest first) and nothing else.
func inboxTable(n names) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    consumer     VARBINARY(%[2]d) NOT NULL,
    message_uuid VARBINARY(%[2]d) NOT NULL,
    processed_at DATETIME(6)     NOT NULL,
    duplicates   BIGINT          NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, message_uuid),
    KEY ix_processed_at (processed_at)
) ENGINE=InnoDB`, n.inbox, outbox.InboxKeyMaxBytes)
}

// inboxLeaseTable holds the retention lease: one row named 'retention'.
func inboxLeaseTable(n names) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    name       VARCHAR(64)  NOT NULL,
    owner      VARCHAR(%[2]d) NOT NULL DEFAULT '',
    token      BINARY(16)   NOT NULL,
    expires_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`, n.inboxLease, maxOwner)
}

// MigrateScript returns the statements that bring a rows table of the previous schema
// (primary key (lane, id), no seq column) to this one: seq is added, the rows of each
// lane numbered in id order (their order until then), and the primary key becomes
// (lane, seq, id). Run it with the table's writers and forwarders stopped: a writer of
// the previous version would store its unordered rows with a seq of AUTO_INCREMENT,
// which the unordered reads of this version never see. ALTER TABLE rebuilds the table.
func MigrateScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	t := QualifiedTable(opts, opts.OutboxTable())
	return strings.Join([]string{
		"ALTER TABLE " + t + " ADD COLUMN seq BIGINT NOT NULL DEFAULT -1 AFTER lane",
		"UPDATE " + t + " AS o JOIN (SELECT lane, id, ROW_NUMBER() OVER (ORDER BY id) AS n FROM " + t +
			" WHERE lane >= 0 OR lane < -2) AS r ON r.lane = o.lane AND r.id = o.id SET o.seq = r.n",
		"ALTER TABLE " + t + " MODIFY seq BIGINT NOT NULL AUTO_INCREMENT, DROP PRIMARY KEY, ADD PRIMARY KEY (lane, seq, id), ADD KEY ix_seq (seq)",
	}, ";\n") + ";\n", nil
}

// validUTF8Max reports whether s is valid UTF-8 of at most max characters.
func validUTF8Max(s string, max int) bool {
	if len(s) <= max {
		return utf8.ValidString(s)
	}
	return utf8.ValidString(s) && utf8.RuneCountInString(s) <= max
}

// laneKeyDoc is where the migration of a table created before the primary key (lane,
// id) is written out.
const laneKeyDoc = "docs/operations.md#mysql-the-primary-key-lane-id"

// checkLaneKey verifies once per Store that the rows table is keyed by (lane, id): a
// table of the earlier schema (primary key id, lane NULL for unordered rows) would take
// no unordered insert (its CHECK refuses lane -1) and show none of its unordered rows to
// the reads, so every Insert and the forwarder's startup check (MaxLane) fail instead
// with an error wrapping outbox.ErrSchemaOutdated. A table that does not exist is left
// to the statement that needs it.
func (s *Store) checkLaneKey(ctx context.Context, q queryRower) error {
	if s.laneKeyOK.Load() {
		return nil
	}
	const query = `SELECT COUNT(*), COALESCE(SUM(INDEX_NAME = 'PRIMARY' AND SEQ_IN_INDEX = 1 AND COLUMN_NAME = 'lane'), 0), ` +
		`COALESCE(SUM(INDEX_NAME = 'PRIMARY' AND SEQ_IN_INDEX = 2 AND COLUMN_NAME = 'seq'), 0) ` +
		`FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`
	var schema any
	if s.opts.Schema != "" {
		schema = s.opts.Schema
	}
	var indexed, laneFirst, seqSecond int64
	if err := q.QueryRowContext(ctx, query, schema, s.opts.OutboxTable()).Scan(&indexed, &laneFirst, &seqSecond); err != nil {
		return fmt.Errorf("check the primary key: %w", err)
	}
	if indexed > 0 && laneFirst == 0 {
		return fmt.Errorf("%w: table %s is keyed by id (the schema before 2026-12-07); this version keys it by (lane, seq, id): migrate it as %s says",
			outbox.ErrSchemaOutdated, s.q.outboxName, laneKeyDoc)
	}
	if indexed > 0 && seqSecond == 0 {
		return fmt.Errorf("%w: table %s has no seq column (the schema before 2026-12-08), so its lanes could not follow commit order; "+
			"stop its writers and forwarders and run the statements of mysql.MigrateScript (outboxctl schema migrate -dialect mysql -prefix %q prints them)",
			outbox.ErrSchemaOutdated, s.q.outboxName, s.opts.TablePrefix)
	}
	if indexed > 0 {
		s.laneKeyOK.Store(true)
	}
	return nil
}

// queryRower is *sql.DB or *sql.Tx.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
