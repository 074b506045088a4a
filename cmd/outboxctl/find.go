package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// ---------------------------------------------------------------- find

func findFlags(fs *flag.FlagSet, o *opts) {
	fs.StringVar(&o.uuid, "uuid", "", "the message UUID")
	keyFlag(fs, o)
	fs.StringVar(&o.topic, "topic", "", "the destination topic (with -since and/or -until)")
	fs.StringVar(&o.since, "since", "", "rows created at or after: RFC 3339 time, or a duration back from now (90m)")
	fs.StringVar(&o.until, "until", "", "rows created before: RFC 3339 time, or a duration back from now")
	fs.IntVar(&o.limit, "limit", outbox.FindLimitDefault, "at most this many rows")
}

// findQuery builds the query of find's flags.
func (o *opts) findQuery(now time.Time) (outbox.FindQuery, error) {
	q := outbox.FindQuery{MessageUUID: o.uuid, Topic: o.topic, Limit: o.limit}
	if o.hasKey {
		if o.key == "" {
			return q, usagef("-key: the ordering key is empty (unordered rows have none)")
		}
		q.OrderingKey = o.key
	}
	var err error
	if q.From, err = instant("-since", o.since, now); err != nil {
		return q, err
	}
	if q.To, err = instant("-until", o.until, now); err != nil {
		return q, err
	}
	if o.limit < 1 {
		return q, usagef("-limit must be at least 1")
	}
	if err := q.Validate(); err != nil {
		return q, usagef("find: give -uuid U, -key K, or -topic T with -since and/or -until (%v)", strings.TrimPrefix(err.Error(), outbox.ErrInvalidArgument.Error()+": "))
	}
	return q, nil
}

// instant parses an RFC 3339 time or a duration back from now ("" = zero).
func instant(flagName, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, usagef("%s %q: want an RFC 3339 time (2026-12-07T10:00:00Z) or a duration back from now (90m)", flagName, s)
	}
	return now.Add(-d), nil
}

type foundJSON struct {
	ID          string            `json:"id"`
	MessageUUID string            `json:"message_uuid"`
	State       string            `json:"state"` // pending, scheduled, claimed, locked, parked
	Lane        int               `json:"lane"`  // -1 = unordered
	OrderingKey string            `json:"ordering_key"`
	Transport   string            `json:"transport"`
	Destination string            `json:"destination"`
	MessageType string            `json:"message_type"`
	TenantID    string            `json:"tenant_id"`
	CreatedAt   time.Time         `json:"created_at"`
	DeliverAt   time.Time         `json:"deliver_at"`
	Attempts    int               `json:"attempts"`
	LastError   string            `json:"last_error"`
	Claim       *claimJSON        `json:"claim"`      // the live or expired claim; null = none
	LaneLease   *leaseJSON        `json:"lane_lease"` // ordered rows: the lane's lease; null = none
	Metadata    map[string]string `json:"metadata"`   // the stored metadata (the payload is never printed)
}

type claimJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	Live      bool      `json:"live"`
}

type inboxEntryJSON struct {
	Consumer    string    `json:"consumer"`
	ProcessedAt time.Time `json:"processed_at"`
	Duplicates  int64     `json:"duplicates"`
}

type findJSON struct {
	Table       string           `json:"table"`
	Now         time.Time        `json:"now"`
	MessageUUID string           `json:"message_uuid,omitempty"`
	OrderingKey string           `json:"ordering_key,omitempty"`
	Topic       string           `json:"topic,omitempty"`
	Since       *time.Time       `json:"since,omitempty"`
	Until       *time.Time       `json:"until,omitempty"`
	Rows        []foundJSON      `json:"rows"`
	More        bool             `json:"more"`           // more rows matched than -limit
	Inbox       []inboxEntryJSON `json:"inbox"`          // -uuid only: consumers whose inbox holds it
	InboxTable  bool             `json:"inbox_table"`    // false: no inbox table
	NotInOutbox string           `json:"not_in_outbox"`  // -uuid without rows: what that means
	Hint        string           `json:"hint,omitempty"` // a suggestion (an index, a window)
}

func find(ctx context.Context, o *opts, w io.Writer) error {
	now := o.now().UTC()
	q, err := o.findQuery(now)
	if err != nil {
		return err
	}
	t, err := connect(ctx, o, true)
	if err != nil {
		return err
	}
	defer t.Close()
	res, inboxTable, err := runFind(ctx, t, q, now)
	if errors.Is(err, outbox.ErrFindNeedsIndex) {
		return fmt.Errorf("find -uuid without -since/-until would read the whole table: %s has no index on message_uuid (%w). "+
			"Add -since (and -until) around when the message was published, or create the index once: "+
			"outboxctl schema print -find-index -dialect %s -prefix %q (it costs every publish: see its comment)",
			qualified(o, o.options().OutboxTable()), outbox.ErrFindNeedsIndex, o.dialect, o.prefix)
	}
	if err != nil {
		return t.explain(ctx, err)
	}
	out := findOutput(o, res, inboxTable)
	if o.json {
		return writeJSON(w, out)
	}
	return printFind(w, out, now)
}

// runFind is outbox.Find, tolerating an inbox table that does not exist (an outbox
// deployed before the inbox): Find has filled the rows when the inbox lookup fails.
func runFind(ctx context.Context, t *target, q outbox.FindQuery, now time.Time) (outbox.FindResult, bool, error) {
	res, err := outbox.Find(ctx, t.store, q, now)
	if err != nil && q.MessageUUID != "" && missingTable(err) && t.probe(ctx, t.o.options().InboxTable()) != nil {
		return res, false, nil
	}
	return res, true, err
}

func findOutput(o *opts, res outbox.FindResult, inboxTable bool) findJSON {
	q := res.Query
	out := findJSON{Table: qualified(o, o.options().OutboxTable()), Now: res.Now, MessageUUID: q.MessageUUID, OrderingKey: q.OrderingKey,
		Topic: q.Topic, Rows: []foundJSON{}, More: res.More, Inbox: []inboxEntryJSON{}, InboxTable: inboxTable, NotInOutbox: res.NotInOutbox}
	if !q.From.IsZero() {
		out.Since = &q.From
	}
	if !q.To.IsZero() {
		out.Until = &q.To
	}
	for _, r := range res.Rows {
		f := foundJSON{ID: r.ID.String(), MessageUUID: r.MessageUUID, State: string(r.State), Lane: r.Lane, OrderingKey: r.OrderingKey,
			Transport: r.Transport, Destination: r.Destination, MessageType: r.MessageType, TenantID: r.TenantID,
			CreatedAt: r.CreatedAt.UTC(), DeliverAt: r.DeliverAt.UTC(), Attempts: r.Attempts, LastError: r.LastError}
		if !r.ClaimToken.IsZero() {
			f.Claim = &claimJSON{Token: r.ClaimToken.String(), ExpiresAt: r.ClaimExpiresAt.UTC(), Live: r.ClaimExpiresAt.After(res.Now)}
		}
		if l := r.Lease; l != nil {
			f.LaneLease = &leaseJSON{Lane: l.Lane, Owner: l.Owner, Token: l.Token.String(), ExpiresAt: l.ExpiresAt.UTC(), Live: l.Live}
		}
		if md, err := headercodec.DecodeMetadata(r.Headers); err == nil {
			f.Metadata = md
		}
		out.Rows = append(out.Rows, f)
	}
	for _, e := range res.Inbox {
		out.Inbox = append(out.Inbox, inboxEntryJSON{Consumer: e.Consumer, ProcessedAt: e.ProcessedAt.UTC(), Duplicates: e.Duplicates})
	}
	if q.MessageUUID != "" && len(res.Rows) == 0 && q.HasWindow() {
		out.Hint = "the search covered only rows created in the window; without the message_uuid index a UUID is looked up within a window"
	}
	return out
}

func printFind(w io.Writer, f findJSON, now time.Time) error {
	var what string
	switch {
	case f.MessageUUID != "":
		what = "message " + f.MessageUUID
	case f.OrderingKey != "":
		what = fmt.Sprintf("ordering key %q", f.OrderingKey)
	default:
		what = "topic " + f.Topic
	}
	if f.Since != nil || f.Until != nil {
		what += " created " + windowText(f.Since, f.Until)
	}
	fmt.Fprintf(w, "%s in %s at %s\n", what, f.Table, now.Format(time.RFC3339))
	if len(f.Rows) == 0 && f.MessageUUID == "" {
		fmt.Fprintln(w, "\nno row in the outbox")
	}
	for _, r := range f.Rows {
		printFoundRow(w, r, now)
	}
	if f.More {
		fmt.Fprintf(w, "\n(more rows match: raise -limit or narrow -since/-until)\n")
	}
	if f.MessageUUID == "" {
		return nil
	}
	if f.NotInOutbox != "" {
		fmt.Fprintf(w, "\n%s\n", wrapText(f.NotInOutbox, 90))
		if f.Hint != "" {
			fmt.Fprintf(w, "(%s)\n", f.Hint)
		}
	}
	switch {
	case !f.InboxTable:
		fmt.Fprintln(w, "\ninbox: no table")
	case len(f.Inbox) == 0:
		fmt.Fprintln(w, "\ninbox: no consumer's inbox holds it (not processed yet by a consumer with the inbox, or its entry expired)")
	default:
		fmt.Fprintln(w, "\ninbox:")
		for _, e := range f.Inbox {
			fmt.Fprintf(w, "  %s: first processed %s (%s ago), %d duplicates skipped\n", e.Consumer, e.ProcessedAt.Format(time.RFC3339Nano),
				age(now.Sub(e.ProcessedAt).Seconds()), e.Duplicates)
		}
	}
	return nil
}

func printFoundRow(w io.Writer, r foundJSON, now time.Time) {
	fmt.Fprintf(w, "\nrow %s  message %s\n", r.ID, r.MessageUUID)
	where := "topic " + r.Destination
	if r.Transport != "" {
		where += " via " + r.Transport
	}
	if r.OrderingKey != "" {
		where += fmt.Sprintf(", key %q (lane %d)", r.OrderingKey, r.Lane)
	} else {
		where += ", unordered"
	}
	fmt.Fprintf(w, "  %s, created %s (%s ago)\n", where, r.CreatedAt.Format(time.RFC3339Nano), age(now.Sub(r.CreatedAt).Seconds()))
	fmt.Fprintf(w, "  %s\n", stateText(r, now))
	if r.Attempts > 0 && r.State != string(outbox.RowParked) {
		fmt.Fprintf(w, "  %s failed, last error: %s\n", attempts(r.Attempts), oneLine(r.LastError, 200))
	}
	if l := r.LaneLease; l != nil {
		state := fmt.Sprintf("live until %s", l.ExpiresAt.Format(time.RFC3339))
		if !l.Live {
			state = "expired: no forwarder holds the lane"
		}
		fmt.Fprintf(w, "  lane %d lease: %s (token %s), %s\n", l.Lane, l.Owner, l.Token, state)
	}
}

// stateText says where the row stands.
func stateText(r foundJSON, now time.Time) string {
	switch outbox.RowState(r.State) {
	case outbox.RowParked:
		return fmt.Sprintf("PARKED after %s: %s (outboxctl parked requeue -id %s sends it again)", attempts(r.Attempts), oneLine(r.LastError, 200), r.ID)
	case outbox.RowClaimed:
		return fmt.Sprintf("IN FLIGHT: claimed by token %s until %s (in %s)", r.Claim.Token, r.Claim.ExpiresAt.Format(time.RFC3339Nano),
			r.Claim.ExpiresAt.Sub(now).Round(time.Millisecond))
	case outbox.RowLocked:
		return "IN FLIGHT: locked by a forwarder's open batch (row-lock claims), being sent"
	case outbox.RowScheduled:
		return fmt.Sprintf("SCHEDULED for %s (in %s)", r.DeliverAt.Format(time.RFC3339Nano), age(r.DeliverAt.Sub(now).Seconds()))
	}
	s := fmt.Sprintf("PENDING: due since %s (%s ago)", r.DeliverAt.Format(time.RFC3339Nano), age(now.Sub(r.DeliverAt).Seconds()))
	if l := r.LaneLease; l != nil && l.Live {
		s += fmt.Sprintf("; in flight under the lane's lease once it heads the lane (held by %s)", l.Owner)
	}
	return s
}

func windowText(since, until *time.Time) string {
	switch {
	case since != nil && until != nil:
		return "from " + since.Format(time.RFC3339Nano) + " until " + until.Format(time.RFC3339Nano)
	case since != nil:
		return "since " + since.Format(time.RFC3339Nano)
	default:
		return "before " + until.Format(time.RFC3339Nano)
	}
}

// wrapText breaks s into lines of at most n characters at spaces.
func wrapText(s string, n int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && line+1+len(word) > n {
			b.WriteByte('\n')
			line = 0
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// findIndexScript is FindIndexScript of o's dialect.
func findIndexScript(o *opts) (string, error) {
	switch o.dialect {
	case "postgres":
		return postgres.FindIndexScript(o.options())
	case "sqlserver":
		return sqlserver.FindIndexScript(o.options())
	}
	return mysql.FindIndexScript(o.options())
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
