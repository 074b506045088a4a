package outbox

import (
	"strings"
	"unicode/utf8"
)

const (
	// LanesDefault is the lane count used when Options.Lanes is zero.
	LanesDefault = 64
	// LanesMax bounds Options.Lanes; lane leases are rows, and more lanes than this only
	// add lease traffic.
	LanesMax = 4096
)

// Options names one outbox table and its lane count. Every writer and forwarder of a
// table must use equal Options. Dialects add their own identifier rules on top of
// Validate (length limits, quoting).
type Options struct {
	// Schema holds the tables; "" selects the connection's default (MySQL: the database
	// of the DSN; PostgreSQL: the search path; SQL Server: dbo).
	Schema string
	// TablePrefix is prepended to the table names: "outbox" (the rows), "outbox_lanes"
	// (lane leases), "outbox_nodes" (forwarder heartbeats), "inbox" (message UUIDs
	// consumers applied, package inbox) and "inbox_lease" (its retention lease).
	TablePrefix string
	// Lanes is the number of ordering lanes (default LanesDefault). Changing it requires
	// draining the table first: ordering keys would map to other lanes.
	Lanes int
}

// WithDefaults returns a copy with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Lanes == 0 {
		o.Lanes = LanesDefault
	}
	return o
}

// Validate checks the dialect-independent rules; errors wrap ErrInvalidOptions and name
// the field.
func (o Options) Validate() error {
	if o.Lanes < 1 || o.Lanes > LanesMax {
		return invalidOption("Lanes", "must be between 1 and %d, got %d", LanesMax, o.Lanes)
	}
	if err := checkIdentifierPart("Schema", o.Schema); err != nil {
		return err
	}
	return checkIdentifierPart("TablePrefix", o.TablePrefix)
}

func checkIdentifierPart(field, s string) error {
	if !utf8.ValidString(s) {
		return invalidOption(field, "is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalidOption(field, "contains a NUL character")
	}
	return nil
}

// SameTable reports whether o and other name the same table with the same lane count
// (after defaults).
func (o Options) SameTable(other Options) bool {
	return o.WithDefaults() == other.WithDefaults()
}

// Unquoted table names; dialects quote them (and the schema) with their one helper.
func (o Options) OutboxTable() string { return o.TablePrefix + "outbox" }
func (o Options) LanesTable() string  { return o.TablePrefix + "outbox_lanes" }
func (o Options) NodesTable() string  { return o.TablePrefix + "outbox_nodes" }
func (o Options) InboxTable() string  { return o.TablePrefix + "inbox" }
func (o Options) InboxLeaseTable() string {
	return o.TablePrefix + "inbox_lease"
}

// TableNames lists every table the dialects' schema scripts create for o (unquoted),
// for tools and tests that drop them.
func (o Options) TableNames() []string {
	return []string{o.OutboxTable(), o.LanesTable(), o.NodesTable(), o.InboxTable(), o.InboxLeaseTable()}
}
