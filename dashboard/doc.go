// Package dashboard is an operator's web dashboard for one outbox: an http.Handler the
// application mounts behind its own routing and authentication, the way River UI's
// handler is mounted. It uses the standard library only (html/template, embedded CSS
// and JavaScript: no external assets, it works offline), and reads through the
// outbox.Store contract, so it serves every dialect.
//
//	h, err := dashboard.New(store, dashboard.Config{}, logger) // read-only
//	mux.Handle("/outbox/", requireAdmin(http.StripPrefix("/outbox", h)))
//
// `outboxctl serve -listen 127.0.0.1:8080` runs the same handler standalone.
//
// # Views
//
//   - Overview: the eligible backlog, ordered (in lanes) and unordered; pending rows not
//     eligible now (scheduled for later, or under a live claim: in flight); the wait of
//     the oldest eligible row; the parked count; the backlog trend; and the forwarder
//     instances (live heartbeats from Store.Members, joined with the live lane leases of
//     Store.Leases). It refreshes in place: a script fetches api/overview (the same
//     figures as JSON) every Config.RefreshInterval.
//   - Backlog trend: the store keeps no record of sent rows (they are deleted), so the
//     send rate cannot be read from it. The overview shows instead how many pending rows
//     fewer there are per minute, from samples of the pending count this Handler keeps in
//     memory (one per overview request, at most one per 2 s, for Config.RateWindow). It
//     is rows sent and purged minus rows written: zero while writers keep pace with
//     the forwarders, negative while the backlog grows. It is measured only while someone
//     has the overview open. The forwarder's metrics (forwarder/prometheus) have the
//     send rate itself.
//   - Lanes: per lane, the holder of its live lease and its expiry, the eligible backlog
//     and the wait of its oldest eligible row; sortable by each column. A lane is stuck
//     when it has eligible rows and no live lease, or its oldest eligible row has waited
//     longer than Config.StuckAfter; stuck lanes come first.
//   - Parked: parked rows in id order, a page of Config.PageSize at a time, filtered by
//     ordering key (the store's indexed filter), topic substring, error text substring
//     (ignoring case) and age (created at least that long ago). The last three are
//     applied here to pages of Store.ListParked: one request reads at most
//     Config.ScanLimit parked rows and offers to continue after the last row it read.
//     The row view shows the decoded metadata (at most Config.MetadataEntries entries,
//     values that are not UTF-8 as hex) and a payload preview of at most
//     Config.PreviewBytes: pretty-printed JSON, text, or a hex dump.
//   - Inbox: per consumer, entries, oldest entry and skipped duplicates
//     (Inbox.InboxStats), when the store has an inbox.
//   - Find: where the rows of one ordering key are: its lane and the lane's lease, the
//     lane's head row (Store.Head), the key's rows among the first 50 eligible rows of the
//     lane (Store.Read) and its parked rows (Store.ListParked by key). The store contract
//     has no lookup by message UUID, so the dashboard offers none.
//
// The overview and the lanes view show one snapshot of the backlog figures: Stats,
// Count (at a far-future instant: every pending row), PendingLanes, Leases and Members,
// read at once on five connections. Stats and Count read every pending row, so one
// snapshot serves every page and viewer for Config.SnapshotMaxAge, at most one is read
// at a time, and a page asked for later (up to a minute) shows the last one at once,
// with the instant it was read, while a fresh one is read for the next request. The
// other views read rows with small limits (ListParked, Head, Read, InboxStats); a
// request's database work is bounded by Config.QueryTimeout. Page times over a
// 1,000,000-row backlog are in benchmarks/README.md. A part that fails is named on the page ("failed: the
// application log has the error") and the other parts are still shown; database
// errors go to the log, never into a page.
//
// # Actions
//
// With Config.AllowMutations the parked views offer requeue and purge, of one row or of
// every row matching the filter. A confirmation page names the rows and their count
// first: for a filter it reads the matching rows (at most Config.MaxActionRows of
// them, within max(ScanLimit, MaxActionRows) rows read) and the action changes exactly
// those ids (Store.Requeue or Store.Purge with ParkedFilter.IDs), so rows parked after
// the confirmation are never touched; when more rows match, the page says so and the
// action is repeated for the rest. Mutations are POST only, refused (403) unless they
// carry the CSRF token of the dashboard's cookie (double submit, SameSite=Strict,
// HttpOnly) and pass net/http's CrossOriginProtection (Sec-Fetch-Site, else Origin
// against Host; Config.TrustedOrigins adds origins, for a proxy that rewrites Host).
// Each is logged at info level with the operation, the selection, the
// rows requested and changed, the first ids, the remote address and Config.Actor's
// name for the request. Without AllowMutations no action is shown and POSTs are
// refused.
//
// # Safety
//
// Everything stored is shown through html/template's contextual escaping, after
// invalid UTF-8 is replaced by U+FFFD, and cut to Config.FieldBytes (marked, with the
// stored size). Pages carry a Content-Security-Policy that allows only the dashboard's
// own script and style (no inline script), and X-Frame-Options DENY. Pages never show a
// DSN, a database error or a credential: the handler never sees the DSN, and database
// errors go to the log only.
package dashboard
