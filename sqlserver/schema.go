package sqlserver

import (
	"strconv"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
)

// CreateScript returns idempotent T-SQL that creates the outbox's tables and indexes,
// and opts.Schema when it is set and missing (as PostgreSQL's CREATE SCHEMA IF NOT
// EXISTS does): existing objects are left as they are, never validated or altered,
// except that the outbox table's own indexes get ALLOW_PAGE_LOCKS = OFF when they
// allow page locks (tables created by earlier versions; see the package doc). The
// text is one valid batch (no GO separators), so it can go to a migration tool or to
// sql.DB.Exec as is.
func CreateScript(opts outbox.Options) (string, error) {
	opts, err := validateOptions(opts)
	if err != nil {
		return "", err
	}
	return strings.Join(createStatements(opts), "\n\n") + "\n", nil
}

// zeroBinary16 is the all-zero id or token, which the CHECK constraints reject.
const zeroBinary16 = "0x00000000000000000000000000000000"

// createStatements returns the script as separate statements, which CreateSchema runs
// one by one (on one connection, so the SET applies to the rest).
func createStatements(opts outbox.Options) []string {
	n := newNames(opts)
	q := quoteIdent
	schema := q(n.schema)
	outbox := schema + "." + q(n.outbox)
	lanes := schema + "." + q(n.lanes)
	nodes := schema + "." + q(n.nodes)

	// Filtered indexes can only be created (and their table written) with these
	// settings, which go-mssqldb's sessions have but sqlcmd's do not (QUOTED_IDENTIFIER
	// is off there unless -I); varbinary columns keep trailing zero bytes only when
	// created with ANSI_PADDING ON.
	stmts := []string{"SET ANSI_NULLS ON;\nSET ANSI_PADDING ON;\nSET ANSI_WARNINGS ON;\nSET ARITHABORT ON;\n" +
		"SET CONCAT_NULL_YIELDS_NULL ON;\nSET QUOTED_IDENTIFIER ON;\nSET NUMERIC_ROUNDABORT OFF;"}
	if opts.Schema != "" {
		stmts = append(stmts, "IF SCHEMA_ID("+quoteString(n.schema)+") IS NULL\n"+
			"    EXEC("+quoteString("CREATE SCHEMA "+schema)+");")
	}

	stmts = append(stmts, "IF OBJECT_ID("+quoteString(outbox)+", N'U') IS NULL\nBEGIN\n"+
		"    CREATE TABLE "+outbox+" (\n"+
		"        id binary(16) NOT NULL,\n"+
		"        message_uuid nvarchar(max) NOT NULL CONSTRAINT "+q(n.dfMessageUUID)+" DEFAULT N'',\n"+
		"        lane int NULL,\n"+
		"        ordering_key nvarchar(max) NULL,\n"+
		"        transport nvarchar(max) NOT NULL CONSTRAINT "+q(n.dfTransport)+" DEFAULT N'',\n"+
		"        destination nvarchar(max) NOT NULL,\n"+
		"        message_type nvarchar(max) NULL,\n"+
		"        headers varbinary(max) NOT NULL,\n"+
		"        body varbinary(max) NOT NULL,\n"+
		"        tenant_id nvarchar(max) NULL,\n"+
		"        created_at datetimeoffset(7) NOT NULL,\n"+
		"        deliver_at datetimeoffset(7) NOT NULL,\n"+
		"        attempts int NOT NULL CONSTRAINT "+q(n.dfAttempts)+" DEFAULT 0,\n"+
		"        last_error nvarchar(max) NULL,\n"+
		"        status varchar(16) NOT NULL CONSTRAINT "+q(n.dfStatus)+" DEFAULT 'pending',\n"+
		"        claim_token binary(16) NULL,\n"+
		"        claim_expires_at datetimeoffset(7) NULL,\n"+
		"        seq bigint IDENTITY(1,1) NOT NULL,\n"+
		"        CONSTRAINT "+q(n.outboxPK)+" PRIMARY KEY CLUSTERED (id) WITH (ALLOW_PAGE_LOCKS = OFF),\n"+
		"        CONSTRAINT "+q(n.ckID)+" CHECK (id <> "+zeroBinary16+"),\n"+
		"        CONSTRAINT "+q(n.ckLane)+" CHECK (lane >= 0),\n"+
		"        CONSTRAINT "+q(n.ckHeaders)+" CHECK (DATALENGTH(headers) >= 8),\n"+
		"        CONSTRAINT "+q(n.ckAttempts)+" CHECK (attempts >= 0),\n"+
		"        CONSTRAINT "+q(n.ckStatus)+" CHECK (status IN ('pending', 'parked')),\n"+
		"        CONSTRAINT "+q(n.ckClaim)+" CHECK ((claim_token IS NULL AND claim_expires_at IS NULL)\n"+
		"            OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND claim_token <> "+zeroBinary16+"))\n"+
		"    );\n"+
		// A writer's large commit would otherwise escalate to a table lock and stall
		// every claimer (READPAST skips row locks only) until it commits.
		"    ALTER TABLE "+outbox+" SET (LOCK_ESCALATION = DISABLE);\n"+
		"END;")

	// ALLOW_PAGE_LOCKS = OFF on every index of the outbox table: READPAST skips row
	// locks only, so a page lock taken by a multi-row write (a Complete of 2,000 ids, a
	// Requeue or Purge of a key, an application's multi-row INSERT or bulk copy) would
	// make the claims, LockBatch and the scout wait for the writer's whole transaction.
	// Without page locks the engine takes row locks (escalation to the table is
	// disabled above).
	index := func(name, def string) string {
		return "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = " + quoteString(name) +
			" AND object_id = OBJECT_ID(" + quoteString(outbox) + "))\n" +
			"    CREATE INDEX " + q(name) + " ON " + outbox + " " + def + " WITH (ALLOW_PAGE_LOCKS = OFF);"
	}
	stmts = append(stmts,
		// Both hot reads: the due unordered rows (lane IS NULL) in id order, and the head
		// of one lane in seq order: the IDENTITY numbers a row when the publisher inserts
		// it, at its commit, so a transaction that began after another committed, or
		// waited for its lock, comes after it in its lane whatever the writers' clocks.
		// Eligibility is checked from the included columns.
		index(n.ixPending, "(lane, id) INCLUDE (deliver_at, claim_expires_at) WHERE status = 'pending'"),
		index(n.ixLaneSeq, "(lane, seq) INCLUDE (deliver_at, claim_expires_at) WHERE status = 'pending' AND lane IS NOT NULL"),
		// Parked rows are few: listing them, and "park the key" claims looking for an
		// earlier parked row of the same key in a lane.
		index(n.ixParked, "(lane, id) INCLUDE (ordering_key) WHERE status = 'parked'"),
		// Renew, complete and fail find a token's rows without touching (or waiting for)
		// any other row.
		index(n.ixClaims, "(claim_token) INCLUDE (claim_expires_at, lane) WHERE claim_token IS NOT NULL"),
	)
	// A table created before the indexes disallowed page locks gets them disallowed
	// (once: the guard reads sys.indexes).
	for _, name := range []string{n.outboxPK, n.ixPending, n.ixParked, n.ixClaims} {
		stmts = append(stmts, "IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = "+quoteString(name)+
			" AND object_id = OBJECT_ID("+quoteString(outbox)+") AND allow_page_locks = 1)\n"+
			"    ALTER INDEX "+q(name)+" ON "+outbox+" SET (ALLOW_PAGE_LOCKS = OFF);")
	}

	stmts = append(stmts, "IF OBJECT_ID("+quoteString(lanes)+", N'U') IS NULL\n"+
		"    CREATE TABLE "+lanes+" (\n"+
		"        lane int NOT NULL,\n"+
		"        owner nvarchar(400) NOT NULL,\n"+
		"        token binary(16) NOT NULL,\n"+
		"        expires_at datetimeoffset(7) NOT NULL,\n"+
		"        CONSTRAINT "+q(n.lanesPK)+" PRIMARY KEY CLUSTERED (lane),\n"+
		"        CONSTRAINT "+q(n.ckLanesLane)+" CHECK (lane >= 0),\n"+
		"        CONSTRAINT "+q(n.ckLanesToken)+" CHECK (token <> "+zeroBinary16+")\n"+
		"    );")

	// A binary collation makes owners that differ only in case or accents distinct
	// members, as they are in Go.
	stmts = append(stmts, "IF OBJECT_ID("+quoteString(nodes)+", N'U') IS NULL\n"+
		"    CREATE TABLE "+nodes+" (\n"+
		"        owner nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,\n"+
		"        expires_at datetimeoffset(7) NOT NULL,\n"+
		"        CONSTRAINT "+q(n.nodesPK)+" PRIMARY KEY CLUSTERED (owner)\n"+
		"    );")
	return append(stmts, inboxStatements(n)...)
}

// inboxStatements creates the inbox (one row per consumer and message UUID applied) and
// its retention lease. The keys are varbinary (UTF-8 bytes), compared byte for byte as
// Go compares strings (nvarchar '=' ignores trailing spaces); two of 400 bytes stay
// within the 900-byte clustered key limit.
func inboxStatements(n names) []string {
	q := quoteIdent
	schema := q(n.schema)
	inbox := schema + "." + q(n.inbox)
	lease := schema + "." + q(n.inboxLease)
	size := strconv.Itoa(outbox.InboxKeyMaxBytes)
	return []string{
		"IF OBJECT_ID(" + quoteString(inbox) + ", N'U') IS NULL\n" +
			"    CREATE TABLE " + inbox + " (\n" +
			"        consumer varbinary(" + size + ") NOT NULL,\n" +
			"        message_uuid varbinary(" + size + ") NOT NULL,\n" +
			"        processed_at datetimeoffset(7) NOT NULL,\n" +
			"        duplicates bigint NOT NULL CONSTRAINT " + q(n.inboxDupDf) + " DEFAULT 0,\n" +
			"        CONSTRAINT " + q(n.inboxPK) + " PRIMARY KEY CLUSTERED (consumer, message_uuid)\n" +
			"    );",
		"IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = " + quoteString(n.inboxAgeIx) +
			" AND object_id = OBJECT_ID(" + quoteString(inbox) + "))\n" +
			"    CREATE INDEX " + q(n.inboxAgeIx) + " ON " + inbox + " (processed_at);",
		"IF OBJECT_ID(" + quoteString(lease) + ", N'U') IS NULL\n" +
			"    CREATE TABLE " + lease + " (\n" +
			"        name varchar(64) NOT NULL,\n" +
			"        owner nvarchar(400) NOT NULL,\n" +
			"        token binary(16) NOT NULL,\n" +
			"        expires_at datetimeoffset(7) NOT NULL,\n" +
			"        CONSTRAINT " + q(n.inboxLeasePK) + " PRIMARY KEY CLUSTERED (name),\n" +
			"        CONSTRAINT " + q(n.ckInboxLeaseTk) + " CHECK (token <> " + zeroBinary16 + ")\n" +
			"    );",
	}
}
