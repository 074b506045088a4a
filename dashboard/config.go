package dashboard

import (
	"fmt"
	"net/http"
	"time"
)

// Defaults of Config; a zero field takes its default.
const (
	RefreshIntervalDefault = 5 * time.Second
	QueryTimeoutDefault    = 5 * time.Second
	PageSizeDefault        = 50
	ScanLimitDefault       = 500
	MaxActionRowsDefault   = 1000
	StuckAfterDefault      = time.Minute
	PreviewBytesDefault    = 4096
	FieldBytesDefault      = 512
	MetadataEntriesDefault = 100
	RateWindowDefault      = 5 * time.Minute
	SnapshotMaxAgeDefault  = 2 * time.Second
	TitleDefault           = "watermill-outbox"
)

// Upper bounds of Config's size fields: a page stays small whatever the configuration.
const (
	PageSizeMax        = 500
	ScanLimitMax       = 10000
	MaxActionRowsMax   = 10000
	PreviewBytesMax    = 1 << 20
	FieldBytesMax      = 64 << 10
	MetadataEntriesMax = 10000
)

// Config configures a Handler. It is passed by value; New applies the defaults and
// validates it.
type Config struct {
	// AllowMutations shows the requeue and purge actions and accepts them (POST with a
	// CSRF token from the same origin). Defaults to false: the dashboard is read-only.
	AllowMutations bool

	// Title is shown in the page header and title, to tell dashboards of several
	// outboxes apart. Defaults to TitleDefault.
	Title string

	// RefreshInterval is how often an open overview fetches fresh figures.
	// Defaults to RefreshIntervalDefault (5s).
	RefreshInterval time.Duration

	// QueryTimeout bounds the database work of one request. Defaults to
	// QueryTimeoutDefault (5s).
	QueryTimeout time.Duration

	// PageSize is how many parked rows a page of the parked list shows (at most
	// PageSizeMax). Defaults to PageSizeDefault (50).
	PageSize int

	// ScanLimit is how many parked rows one request reads at most while looking for rows
	// matching a topic, error text or age filter (those filters are applied to pages of
	// Store.ListParked; the ordering-key filter is the store's own). A page that reached
	// it offers to continue from where it stopped. At most ScanLimitMax.
	// Defaults to ScanLimitDefault (500).
	ScanLimit int

	// MaxActionRows is how many rows one "all matching" requeue or purge changes at
	// most; the confirmation names the count. At most MaxActionRowsMax.
	// Defaults to MaxActionRowsDefault (1000).
	MaxActionRows int

	// StuckAfter marks a lane stuck when its oldest eligible row has waited longer
	// (a lane with eligible rows and no live lease is stuck at once).
	// Defaults to StuckAfterDefault (1m).
	StuckAfter time.Duration

	// PreviewBytes bounds the payload preview of the row view. Defaults to
	// PreviewBytesDefault (4096).
	PreviewBytes int

	// FieldBytes bounds every other stored text shown (topic, key, error, metadata
	// value): longer texts are cut and marked. Defaults to FieldBytesDefault (512).
	FieldBytes int

	// MetadataEntries bounds the metadata entries the row view shows; it names how many
	// more there are. Defaults to MetadataEntriesDefault (100).
	MetadataEntries int

	// RateWindow is how far back the backlog samples behind the overview's rate go.
	// Defaults to RateWindowDefault (5m).
	RateWindow time.Duration

	// SnapshotMaxAge is how long one read of the backlog figures (Stats, the pending
	// count, PendingLanes, Leases, Members: the overview and the lanes view) is shared by
	// every request and viewer: Stats counts the whole backlog, so the dashboard runs at
	// most one such read at a time, however many people watch. A page asked for later
	// (up to a minute) shows the last figures at once, with the instant they were read,
	// and starts a fresh read for the next request. A negative value reads them for
	// every request, and the page waits. Defaults to SnapshotMaxAgeDefault (2s).
	SnapshotMaxAge time.Duration

	// TrustedOrigins are origins ("https://admin.example.com") whose pages may post
	// mutations besides the dashboard's own (net/http's CrossOriginProtection compares
	// a browser's Origin with the request's Host; behind a proxy that rewrites Host,
	// name the origin people use). Defaults to none.
	TrustedOrigins []string

	// Actor names the person behind a request in the mutation log, for example the user
	// the application's authentication middleware put in the request's context.
	// Defaults to nil: the log names the remote address only.
	Actor func(*http.Request) string
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Title == "" {
		c.Title = TitleDefault
	}
	defDur(&c.RefreshInterval, RefreshIntervalDefault)
	defDur(&c.QueryTimeout, QueryTimeoutDefault)
	defDur(&c.StuckAfter, StuckAfterDefault)
	defDur(&c.RateWindow, RateWindowDefault)
	defDur(&c.SnapshotMaxAge, SnapshotMaxAgeDefault)
	def(&c.PageSize, PageSizeDefault)
	def(&c.ScanLimit, ScanLimitDefault)
	def(&c.MaxActionRows, MaxActionRowsDefault)
	def(&c.PreviewBytes, PreviewBytesDefault)
	def(&c.FieldBytes, FieldBytesDefault)
	def(&c.MetadataEntries, MetadataEntriesDefault)
}

// Validate checks a Config after defaults; the error wraps ErrInvalidConfig and names
// the field.
func (c Config) Validate() error {
	checks := []struct {
		name      string
		v, lo, hi int
	}{
		{"PageSize", c.PageSize, 1, PageSizeMax},
		{"ScanLimit", c.ScanLimit, 1, ScanLimitMax},
		{"MaxActionRows", c.MaxActionRows, 1, MaxActionRowsMax},
		{"PreviewBytes", c.PreviewBytes, 16, PreviewBytesMax},
		{"FieldBytes", c.FieldBytes, 16, FieldBytesMax},
		{"MetadataEntries", c.MetadataEntries, 1, MetadataEntriesMax},
	}
	for _, k := range checks {
		if k.v < k.lo || k.v > k.hi {
			return fmt.Errorf("%w: Config.%s is %d; want %d to %d", ErrInvalidConfig, k.name, k.v, k.lo, k.hi)
		}
	}
	durs := []struct {
		name string
		v    time.Duration
		lo   time.Duration
	}{
		{"RefreshInterval", c.RefreshInterval, 500 * time.Millisecond},
		{"QueryTimeout", c.QueryTimeout, 10 * time.Millisecond},
		{"StuckAfter", c.StuckAfter, time.Second},
		{"RateWindow", c.RateWindow, 10 * time.Second},
	}
	for _, d := range durs {
		if d.v < d.lo {
			return fmt.Errorf("%w: Config.%s is %s; want at least %s", ErrInvalidConfig, d.name, d.v, d.lo)
		}
	}
	return nil
}
