package sqlserver

import (
	"strings"
	"unicode/utf16"

	outbox "github.com/relayer-go/watermill-outbox"
)

const (
	// MaxIdentifierUnits is SQL Server's limit for one name (sysname is nvarchar(128)),
	// counted in UTF-16 code units: a supplementary character takes two.
	MaxIdentifierUnits = 128

	// MaxTablePrefixUnits is the longest TablePrefix, in UTF-16 code units, for which
	// every table, index and constraint name stays within MaxIdentifierUnits: the longest
	// name appends "outbox_df_message_uuid" (22 units) to the prefix.
	MaxTablePrefixUnits = MaxIdentifierUnits - 22

	// DefaultSchema holds the tables when Options.Schema is empty.
	DefaultSchema = "dbo"
)

// validateOptions applies the defaults and checks the dialect-independent rules and
// SQL Server's identifier rules for every name the options produce (schema, tables,
// indexes and constraints). Errors wrap outbox.ErrInvalidOptions and name the field.
func validateOptions(o outbox.Options) (outbox.Options, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.Schema != "" {
		if n := utf16Len(o.Schema); n > MaxIdentifierUnits {
			return o, outbox.InvalidOption("Schema", "is %d UTF-16 code units long; SQL Server names hold at most %d", n, MaxIdentifierUnits)
		}
		if strings.TrimRight(o.Schema, " ") == "" {
			return o, outbox.InvalidOption("Schema", "is blank; leave it empty for %s", DefaultSchema)
		}
	}
	if n, max := utf16Len(o.TablePrefix), MaxTablePrefixUnits; n > max {
		return o, outbox.InvalidOption("TablePrefix", "is %d UTF-16 code units long; at most %d fit: the longest name made from it appends %q, and SQL Server names hold at most %d",
			n, max, longestSuffix(), MaxIdentifierUnits)
	}
	// The rule above is derived from the suffixes; checking every generated name keeps
	// it honest should a longer name be added.
	for _, name := range newNames(o).all() {
		if n := utf16Len(name); n > MaxIdentifierUnits {
			return o, outbox.InvalidOption("TablePrefix", "makes the name %q %d UTF-16 code units long; SQL Server names hold at most %d", name, n, MaxIdentifierUnits)
		}
	}
	return o, nil
}

func longestSuffix() string {
	longest := ""
	for _, s := range newNames(outbox.Options{}).all() {
		if len(s) > len(longest) {
			longest = s
		}
	}
	return longest
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// names holds the unquoted names of one outbox's objects. Table-scoped index names are
// prefixed like the schema-scoped constraint names, so that every name is unique in the
// schema and easy to attribute.
type names struct {
	schema string // never empty: DefaultSchema when Options.Schema is

	outbox, lanes, nodes string

	outboxPK, ckID, ckLane, ckHeaders, ckAttempts, ckStatus, ckClaim string
	dfMessageUUID, dfTransport, dfAttempts, dfStatus                 string
	ixPending, ixParked, ixClaims, ixLaneSeq                         string

	lanesPK, ckLanesLane, ckLanesToken string
	nodesPK                            string

	inbox, inboxPK, inboxAgeIx, inboxDupDf   string
	inboxLease, inboxLeasePK, ckInboxLeaseTk string
}

func newNames(o outbox.Options) names {
	n := names{schema: o.Schema, outbox: o.OutboxTable(), lanes: o.LanesTable(), nodes: o.NodesTable()}
	if n.schema == "" {
		n.schema = DefaultSchema
	}
	t := n.outbox
	n.outboxPK = t + "_pk"
	n.ckID = t + "_ck_id"
	n.ckLane = t + "_ck_lane"
	n.ckHeaders = t + "_ck_headers"
	n.ckAttempts = t + "_ck_attempts"
	n.ckStatus = t + "_ck_status"
	n.ckClaim = t + "_ck_claim"
	n.dfMessageUUID = t + "_df_message_uuid"
	n.dfTransport = t + "_df_transport"
	n.dfAttempts = t + "_df_attempts"
	n.dfStatus = t + "_df_status"
	n.ixPending = t + "_ix_pending"
	n.ixParked = t + "_ix_parked"
	n.ixLaneSeq = t + "_ix_lane_seq"
	n.ixClaims = t + "_ix_claims"
	n.lanesPK = n.lanes + "_pk"
	n.ckLanesLane = n.lanes + "_ck_lane"
	n.ckLanesToken = n.lanes + "_ck_token"
	n.nodesPK = n.nodes + "_pk"
	n.inbox = o.InboxTable()
	n.inboxPK = n.inbox + "_pk"
	n.inboxAgeIx = n.inbox + "_ix_age"
	n.inboxDupDf = n.inbox + "_df_duplicates"
	n.inboxLease = o.InboxLeaseTable()
	n.inboxLeasePK = n.inboxLease + "_pk"
	n.ckInboxLeaseTk = n.inboxLease + "_ck_token"
	return n
}

// all lists every name built from the prefix (not the schema).
func (n names) all() []string {
	return []string{
		n.outbox, n.lanes, n.nodes,
		n.outboxPK, n.ckID, n.ckLane, n.ckHeaders, n.ckAttempts, n.ckStatus, n.ckClaim,
		n.dfMessageUUID, n.dfTransport, n.dfAttempts, n.dfStatus,
		n.ixPending, n.ixParked, n.ixClaims, n.ixLaneSeq,
		n.lanesPK, n.ckLanesLane, n.ckLanesToken, n.nodesPK,
		n.inbox, n.inboxPK, n.inboxAgeIx, n.inboxDupDf, n.inboxLease, n.inboxLeasePK, n.ckInboxLeaseTk,
	}
}

// QualifiedTable returns the quoted, schema-qualified name of table (an unquoted name
// such as opts.OutboxTable()) for raw SQL: [schema].[table], dbo when opts.Schema is
// empty.
func QualifiedTable(opts outbox.Options, table string) string {
	schema := opts.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	return quoteIdent(schema) + "." + quoteIdent(table)
}
