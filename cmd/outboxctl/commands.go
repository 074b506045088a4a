package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// ---------------------------------------------------------------- schema

func schemaPrintFlags(fs *flag.FlagSet, o *opts) {
	fs.BoolVar(&o.findIndex, "find-index", false, "print the optional message_uuid index of `find -uuid` instead (costs every publish)")
}

func schemaPrint(_ context.Context, o *opts, w io.Writer) error {
	var script string
	var err error
	if o.findIndex {
		if script, err = findIndexScript(o); err != nil {
			return err
		}
		fmt.Fprintf(w, "-- watermill-outbox: the optional index on message_uuid for %s, prefix %q, schema %q: it lets `outboxctl find -uuid`\n"+
			"-- look a message up without -since; it costs every publish (benchmarks/README.md, \"outboxctl find\")\n", o.dialect, o.prefix, o.schema)
		_, err = io.WriteString(w, script)
		return err
	}
	switch o.dialect {
	case "postgres":
		script, err = postgres.CreateScript(o.options())
	case "sqlserver":
		script, err = sqlserver.CreateScript(o.options())
	default:
		script, err = mysql.CreateScript(o.options())
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- watermill-outbox schema for %s, prefix %q, schema %q (idempotent)\n", o.dialect, o.prefix, o.schema)
	_, err = io.WriteString(w, script)
	return err
}

// schemaMigrate prints the statements that bring a rows table of the previous schema
// (no seq column) to the current one: the dialect's MigrateScript.
func schemaMigrate(_ context.Context, o *opts, w io.Writer) error {
	var script string
	var err error
	switch o.dialect {
	case "postgres":
		script, err = postgres.MigrateScript(o.options())
	case "sqlserver":
		return errors.New("schema migrate: no migration script for sqlserver: drain the outbox, stop its writers, drop the rows table and run schema apply (sqlserver/doc.go)")
	default:
		script, err = mysql.MigrateScript(o.options())
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "-- watermill-outbox: add the seq column (lanes in commit order) to the rows table of %s, prefix %q, schema %q;\n"+
		"-- stop the forwarders (MySQL: and the writers) first (docs/operations.md)\n", o.dialect, o.prefix, o.schema)
	_, err = io.WriteString(w, script)
	return err
}

func schemaApply(ctx context.Context, o *opts, w io.Writer) error {
	t, err := connect(ctx, o, false)
	if err != nil {
		return err
	}
	defer t.Close()
	if err := t.store.CreateSchema(ctx); err != nil {
		return fmt.Errorf("schema apply on %s: %s", o.where(), o.scrub(err))
	}
	opts := o.options()
	names := make([]string, 0, 5)
	for _, table := range opts.TableNames() {
		names = append(names, qualified(o, table))
	}
	fmt.Fprintf(w, "schema applied on %s: %s\n", o.where(), strings.Join(names, ", "))
	return nil
}

// ---------------------------------------------------------------- stats

type laneJSON struct {
	Lane           int        `json:"lane"` // -1 = unordered rows
	Ordered        bool       `json:"ordered"`
	Eligible       int64      `json:"eligible"`
	OldestEligible *time.Time `json:"oldest_eligible,omitempty"`
	OldestAgeSec   float64    `json:"oldest_age_seconds"`
}

type statsJSON struct {
	Table        string     `json:"table"`
	Dialect      string     `json:"dialect"`
	Lanes        int        `json:"lanes"`
	Now          time.Time  `json:"now"`
	Eligible     int64      `json:"eligible"`
	Parked       int64      `json:"parked"`
	OldestAgeSec float64    `json:"oldest_age_seconds"`
	MaxLane      *int       `json:"max_lane"` // greatest lane in the table; null = no ordered rows
	LaneMismatch bool       `json:"lane_mismatch"`
	PerLane      []laneJSON `json:"per_lane"`
	Inbox        *inboxJSON `json:"inbox"` // null: no inbox table (created by schema apply)
}

// inboxJSON is the size of the inbox table and the duplicates its entries skipped
// (outbox.InboxConsumerStats.Duplicates: committed duplicates of the entries kept).
type inboxJSON struct {
	Table    string `json:"table"`
	Outdated string `json:"outdated,omitempty"` // the table needs the ALTER named here; no figures then
	// Error is set when the section could not be read (permission denied, timeout): no
	// figures then; the outbox's figures above it stand.
	Error string `json:"error,omitempty"`
	// Partial: a consumer has more entries than were read (capped) or more consumers
	// exist than listed; entries and duplicates are then lower bounds, entries at least
	// the engine's estimate.
	Partial       bool                `json:"partial"`
	MoreConsumers bool                `json:"more_consumers"`
	Entries       int64               `json:"entries"`
	Duplicates    int64               `json:"duplicates"`
	OldestAgeSec  float64             `json:"oldest_age_seconds"`
	Consumers     []inboxConsumerJSON `json:"consumers"`
}

type inboxConsumerJSON struct {
	Consumer     string     `json:"consumer"`
	Entries      int64      `json:"entries"`
	Capped       bool       `json:"capped"` // more entries than read: entries and duplicates are lower bounds
	Duplicates   int64      `json:"duplicates"`
	Oldest       *time.Time `json:"oldest"` // null when capped
	OldestAgeSec float64    `json:"oldest_age_seconds"`
}

// inboxStats reads the inbox table's size (bounded reads, under a deadline of its
// own); nil when the store has no inbox or its table does not exist (an outbox deployed
// before the inbox). A failure to read it is reported in the section, never as the
// command's error: the inbox is optional, and the backlog must stay visible.
func inboxStats(ctx context.Context, t *target, now time.Time) *inboxJSON {
	in, ok := t.store.(outbox.Inbox)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, inboxTimeout(ctx))
	defer cancel()
	st, err := in.InboxStats(ctx)
	if missingTable(err) {
		return nil
	}
	out := &inboxJSON{Table: qualified(t.o, t.o.options().InboxTable()), Consumers: []inboxConsumerJSON{}}
	switch {
	case errors.Is(err, outbox.ErrSchemaOutdated):
		out.Outdated = t.o.scrub(err)
		return out
	case errors.Is(err, context.DeadlineExceeded):
		out.Error = "timed out (" + t.o.scrub(err) + ")"
		return out
	case err != nil:
		out.Error = t.o.scrub(err)
		return out
	}
	out.Partial, out.MoreConsumers = st.Partial(), st.MoreConsumers
	out.Entries, out.Duplicates = st.Entries(), st.Duplicates()
	if !st.Oldest.IsZero() {
		out.OldestAgeSec = max(0, now.Sub(st.Oldest).Seconds())
	}
	for _, c := range st.Consumers {
		cj := inboxConsumerJSON{Consumer: c.Consumer, Entries: c.Entries, Capped: c.Capped, Duplicates: c.Duplicates}
		if !c.Oldest.IsZero() {
			oldest := c.Oldest.UTC()
			cj.Oldest, cj.OldestAgeSec = &oldest, max(0, now.Sub(oldest).Seconds())
		}
		out.Consumers = append(out.Consumers, cj)
	}
	return out
}

// inboxTimeout is the inbox section's share of what remains of the command's deadline:
// a half, so that a slow inbox read still leaves time to print.
func inboxTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d)/2, time.Millisecond)
	}
	return 10 * time.Second
}

func printInbox(w io.Writer, in *inboxJSON) error {
	switch {
	case in == nil:
		fmt.Fprintln(w, "\ninbox     no table (outboxctl schema apply creates it)")
		return nil
	case in.Outdated != "":
		fmt.Fprintf(w, "\ninbox %s: WARNING: %s\n", in.Table, in.Outdated)
		return nil
	case in.Error != "":
		fmt.Fprintf(w, "\ninbox %s: WARNING: not read: %s\n", in.Table, oneLine(in.Error, 300))
		return nil
	}
	atLeast := ""
	if in.Partial {
		atLeast = "at least "
	}
	fmt.Fprintf(w, "\ninbox %s: %s%d entries, %s%d duplicates skipped, oldest %s\n", in.Table, atLeast, in.Entries, atLeast, in.Duplicates, age(in.OldestAgeSec))
	if len(in.Consumers) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tENTRIES\tDUPLICATES\tOLDEST AGE")
	for _, c := range in.Consumers {
		entries, dups, oldest := fmt.Sprint(c.Entries), fmt.Sprint(c.Duplicates), age(c.OldestAgeSec)
		if c.Capped {
			entries, dups, oldest = ">= "+entries, ">= "+dups, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", safe(c.Consumer, 60), entries, dups, oldest)
	}
	if in.MoreConsumers {
		fmt.Fprintf(tw, "(more consumers)\t\t\t\n")
	}
	return tw.Flush()
}

func stats(ctx context.Context, o *opts, w io.Writer) error {
	t, err := connect(ctx, o, true)
	if err != nil {
		return err
	}
	defer t.Close()
	now := o.now().UTC()
	st, err := t.store.Stats(ctx, now)
	if err != nil {
		return t.explain(ctx, err)
	}
	maxLane, err := t.store.MaxLane(ctx)
	if err != nil {
		return t.explain(ctx, err)
	}
	out := statsJSON{
		Table: qualified(o, o.options().OutboxTable()), Dialect: o.dialect, Lanes: o.lanes,
		Now: now, Parked: st.Parked, PerLane: []laneJSON{},
	}
	out.Inbox = inboxStats(ctx, t, now)
	if maxLane != outbox.Unordered {
		out.MaxLane = &maxLane
		out.LaneMismatch = maxLane >= o.lanes
	}
	for _, l := range st.Lanes {
		lj := laneJSON{Lane: l.Lane, Ordered: l.Lane != outbox.Unordered, Eligible: l.Eligible}
		if !l.OldestEligible.IsZero() {
			oldest := l.OldestEligible.UTC()
			lj.OldestEligible = &oldest
			lj.OldestAgeSec = max(0, now.Sub(oldest).Seconds())
		}
		out.Eligible += l.Eligible
		out.OldestAgeSec = max(out.OldestAgeSec, lj.OldestAgeSec)
		out.PerLane = append(out.PerLane, lj)
	}
	if o.json {
		return writeJSON(w, out)
	}

	fmt.Fprintf(w, "outbox %s on %s (%d lanes)\n", out.Table, o.where(), o.lanes)
	fmt.Fprintf(w, "backlog   %d eligible rows, oldest waiting %s\n", out.Eligible, age(out.OldestAgeSec))
	fmt.Fprintf(w, "parked    %d rows", out.Parked)
	if out.Parked > 0 {
		fmt.Fprint(w, " (outboxctl parked list)")
	}
	fmt.Fprintln(w)
	if out.LaneMismatch {
		fmt.Fprintf(w, "WARNING   the table holds lane %d but -lanes is %d: writers and forwarders must use one lane count\n",
			maxLane, o.lanes)
	}
	if len(out.PerLane) == 0 {
		fmt.Fprintln(w, "no eligible rows")
		return printInbox(w, out.Inbox)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nLANE\tELIGIBLE\tOLDEST AGE")
	for _, l := range out.PerLane {
		lane := fmt.Sprint(l.Lane)
		if !l.Ordered {
			lane = "unordered"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", lane, l.Eligible, age(l.OldestAgeSec))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printInbox(w, out.Inbox)
}

func age(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// ---------------------------------------------------------------- parked

func parkedListFlags(fs *flag.FlagSet, o *opts) {
	keyFlag(fs, o)
	fs.StringVar(&o.after, "after", "", "list rows after this id (paging)")
	fs.IntVar(&o.limit, "limit", 100, "at most this many rows")
}

func keyFlag(fs *flag.FlagSet, o *opts) {
	fs.Func("key", "only rows of this ordering key", func(s string) error {
		o.key, o.hasKey = s, true
		return nil
	})
}

func parkedFilterFlags(fs *flag.FlagSet, o *opts) {
	keyFlag(fs, o)
	fs.StringVar(&o.ids, "id", "", "row ids (comma-separated, as printed by parked list)")
	fs.BoolVar(&o.all, "all", false, "every parked row")
}

func parkedPurgeFlags(fs *flag.FlagSet, o *opts) {
	parkedFilterFlags(fs, o)
	fs.BoolVar(&o.yes, "yes", false, "confirm: purge deletes the rows for good")
}

type parkedJSON struct {
	ID          string    `json:"id"`
	MessageUUID string    `json:"message_uuid"`
	Lane        int       `json:"lane"`
	OrderingKey string    `json:"ordering_key"`
	Transport   string    `json:"transport"`
	Destination string    `json:"destination"`
	MessageType string    `json:"message_type"`
	TenantID    string    `json:"tenant_id"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error"`
	CreatedAt   time.Time `json:"created_at"`
	DeliverAt   time.Time `json:"deliver_at"`
	BodyBytes   int       `json:"body_bytes"` // the payload itself is never printed
}

// maxListLimit bounds parked list's -limit: a page, not the table (page with -after).
const maxListLimit = 1000

func parkedList(ctx context.Context, o *opts, w io.Writer) error {
	if o.limit < 1 || o.limit > maxListLimit {
		return usagef("-limit must be between 1 and %d (page with -after ID), got %d", maxListLimit, o.limit)
	}
	// The payload is never printed: read one byte of it (its length comes apart).
	q := outbox.ParkedQuery{Limit: o.limit, MaxBody: 1}
	if o.after != "" {
		id, err := outbox.ParseID(o.after)
		if err != nil {
			return usagef("-after: %v", err)
		}
		q.After = id
	}
	if o.hasKey {
		q.OrderingKey = &o.key
	}
	t, err := connect(ctx, o, true)
	if err != nil {
		return err
	}
	defer t.Close()
	recs, err := t.store.ListParked(ctx, q)
	if err != nil {
		return t.explain(ctx, err)
	}
	rows := make([]parkedJSON, 0, len(recs))
	for _, r := range recs {
		rows = append(rows, parkedJSON{
			ID: r.ID.String(), MessageUUID: r.MessageUUID, Lane: r.Lane, OrderingKey: r.OrderingKey,
			Transport: r.Transport, Destination: r.Destination, MessageType: r.MessageType, TenantID: r.TenantID,
			Attempts: r.Attempts, LastError: r.LastError, CreatedAt: r.CreatedAt.UTC(), DeliverAt: r.DeliverAt.UTC(),
			BodyBytes: r.BodySize,
		})
	}
	if o.json {
		return writeJSON(w, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "no parked rows in %s\n", qualified(o, o.options().OutboxTable()))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tDESTINATION\tTYPE\tATTEMPTS\tCREATED\tLAST ERROR")
	for _, r := range rows {
		// Keys, topics, types and errors come from messages: escaped, so that no
		// control or escape sequence reaches the operator's terminal.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, dash(safe(r.OrderingKey, 60)), safe(r.Destination, 60),
			dash(safe(r.MessageType, 40)), r.Attempts, r.CreatedAt.Format(time.RFC3339), oneLine(r.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == o.limit {
		fmt.Fprintf(w, "(first %d rows; next page: -after %s)\n", o.limit, rows[len(rows)-1].ID)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row on one line: runs of white space become one space, then
// the text is made safe (safe) and cut to n characters.
func oneLine(s string, n int) string {
	return safe(strings.Join(strings.Fields(s), " "), n)
}

// safe makes message-controlled text printable on a terminal and cuts it to n
// characters: control characters (C0, DEL, C1: ESC and CSI start terminal sequences),
// bidirectional and other format characters, line separators and invalid UTF-8 are
// written as Go escapes (\x1b, \u202e); a backslash is doubled so that no escape can be
// forged.
func safe(s string, n int) string {
	var b strings.Builder
	count := 0
	for i, r := range s {
		if count == n-1 && utf8.RuneCountInString(s[i:]) > 1 {
			b.WriteString("…")
			break
		}
		count++
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i]) // a byte that is not UTF-8
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// filter builds the ParkedFilter of -id, -key or -all (exactly one).
func (o *opts) filter() (outbox.ParkedFilter, string, error) {
	n := 0
	var f outbox.ParkedFilter
	var what string
	if o.ids != "" {
		n++
		for _, s := range strings.Split(o.ids, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			id, err := outbox.ParseID(s)
			if err != nil {
				return f, "", usagef("-id: %v", err)
			}
			f.IDs = append(f.IDs, id)
		}
		if len(f.IDs) == 0 {
			return f, "", usagef("-id: no ids given")
		}
		what = fmt.Sprintf("%d listed ids", len(f.IDs))
	}
	if o.hasKey {
		n++
		key := o.key
		f.OrderingKey = &key
		what = fmt.Sprintf("ordering key %q", o.key)
	}
	if o.all {
		n++
		f.All = true
		what = "all"
	}
	if n != 1 {
		return f, "", usagef("select the parked rows with exactly one of -id, -key or -all")
	}
	return f, what, nil
}

type countJSON struct {
	Action string `json:"action"`
	Rows   int    `json:"rows"`
}

func parkedRequeue(ctx context.Context, o *opts, w io.Writer) error {
	f, what, err := o.filter()
	if err != nil {
		return err
	}
	t, err := connect(ctx, o, true)
	if err != nil {
		return err
	}
	defer t.Close()
	n, err := t.store.Requeue(ctx, f)
	if err != nil {
		return t.explain(ctx, err)
	}
	if o.json {
		return writeJSON(w, countJSON{Action: "requeue", Rows: n})
	}
	fmt.Fprintf(w, "requeued %d parked rows (%s): pending again, due now, attempts reset\n", n, what)
	return nil
}

func parkedPurge(ctx context.Context, o *opts, w io.Writer) error {
	f, what, err := o.filter()
	if err != nil {
		return err
	}
	if !o.yes {
		return usagef("parked purge deletes the parked rows (%s) for good: add --yes to confirm (see them first with `outboxctl parked list`)", what)
	}
	t, err := connect(ctx, o, true)
	if err != nil {
		return err
	}
	defer t.Close()
	n, err := t.store.Purge(ctx, f)
	if err != nil {
		return t.explain(ctx, err)
	}
	if o.json {
		return writeJSON(w, countJSON{Action: "purge", Rows: n})
	}
	fmt.Fprintf(w, "purged %d parked rows (%s)\n", n, what)
	return nil
}

// ---------------------------------------------------------------- leases

type leaseJSON struct {
	Lane      int       `json:"lane"`
	Owner     string    `json:"owner"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	Live      bool      `json:"live"`
}

type leasesJSON struct {
	Now     time.Time      `json:"now"`
	Members []string       `json:"members"` // forwarders with a live heartbeat
	Leases  []leaseJSON    `json:"leases"`
	Held    map[string]int `json:"held"` // live leases per owner
}

func leases(ctx context.Context, o *opts, w io.Writer) error {
	t, err := connect(ctx, o, true)
	if err != nil {
		return err
	}
	defer t.Close()
	now := o.now().UTC()
	ls, err := t.store.Leases(ctx)
	if err != nil {
		return t.explain(ctx, err)
	}
	members, err := t.store.Members(ctx)
	if err != nil {
		return t.explain(ctx, err)
	}
	out := leasesJSON{Now: now, Members: members, Leases: []leaseJSON{}, Held: map[string]int{}}
	if out.Members == nil {
		out.Members = []string{}
	}
	for _, l := range ls {
		live := l.Live // on the database's clock
		out.Leases = append(out.Leases, leaseJSON{Lane: l.Lane, Owner: l.Owner, Token: l.Token.String(),
			ExpiresAt: l.ExpiresAt.UTC(), Live: live})
		if live {
			out.Held[l.Owner]++
		}
	}
	if o.json {
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "forwarders with a live heartbeat: %d\n", len(members))
	for _, m := range members {
		fmt.Fprintf(w, "  %s  holds %d lanes\n", safe(m, 60), out.Held[m])
	}
	owners := make([]string, 0, len(out.Held))
	for owner := range out.Held {
		owners = append(owners, owner)
	}
	sort.Strings(owners)
	for _, owner := range owners {
		if !contains(members, owner) {
			fmt.Fprintf(w, "  %s  holds %d lanes (no live heartbeat: its leases run out)\n", safe(owner, 60), out.Held[owner])
		}
	}
	if len(out.Leases) == 0 {
		fmt.Fprintln(w, "no lane leases")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nLANE\tOWNER\tEXPIRES\tSTATE")
	for _, l := range out.Leases {
		state := "live"
		when := "in " + l.ExpiresAt.Sub(now).Round(time.Millisecond).String()
		if !l.Live {
			state = "expired"
			when = now.Sub(l.ExpiresAt).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s (%s)\t%s\n", l.Lane, safe(l.Owner, 60), l.ExpiresAt.Format(time.RFC3339), when, state)
	}
	return tw.Flush()
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
