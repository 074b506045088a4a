// Command outboxctl operates watermill-outbox tables: deploy the schema, watch the
// backlog, deal with parked (poison) rows, and see which forwarder holds which lane.
//
//	outboxctl schema print  -dialect mysql -prefix orders_          # the DDL, for a migration tool
//	outboxctl schema apply  -dsn "$DSN" -prefix orders_             # run it (idempotent)
//	outboxctl schema migrate -dialect mysql -prefix orders_        # a table without seq: the statements that add it
//	outboxctl stats         -dsn "$DSN" -prefix orders_ [--json]    # backlog per lane, parked, inbox size and duplicates
//	outboxctl parked list   -dsn "$DSN" [-key K] [-limit N] [--json]
//	outboxctl parked requeue -dsn "$DSN" (-id ID[,ID...] | -key K | -all)
//	outboxctl parked purge   -dsn "$DSN" (-id ID[,ID...] | -key K | -all) --yes
//	outboxctl leases        -dsn "$DSN" [--json]                    # lane leases and live forwarders
//	outboxctl serve         -dsn "$DSN" [-listen 127.0.0.1:8080] [-allow-mutations]  # the web dashboard
//	outboxctl find          -dsn "$DSN" (-uuid U | -key K | -topic T) [-since T] [-until T] [-limit N] [--json]
//
// find says where messages are (outbox.Find): by message UUID, by ordering key, or by
// topic and creation window (-since/-until: RFC 3339 times or durations back from now),
// per matching row its state (pending, scheduled for T, claimed under a token, locked
// in a forwarder's open batch, parked with its error and attempts) and its lane's
// lease, and for a UUID the inbox entries of every consumer that processed it (first
// processed, duplicates skipped), or "not in the outbox" (sent or never committed,
// which the database cannot tell apart). A UUID without a window needs the optional
// message_uuid index: `schema print -find-index` prints its DDL (it costs every
// publish).
//
// Every command takes -dialect (mysql, postgres or sqlserver; guessed from the DSN when
// omitted), -dsn (or the OUTBOX_DSN environment variable), -schema, -prefix and -lanes,
// which must match what the application's writers and forwarders use. Passwords in DSNs
// are never printed; message payloads are never printed at all. Text that comes from
// messages (keys, topics, types, errors) is printed with control and format characters
// escaped (\x1b, \u202e), so that no escape sequence reaches the terminal; --json keeps
// it exact. parked list pages at most 1,000 rows at a time (-limit, then -after).
//
// stats counts eligible rows: pending, due, and not claimed by a live forwarder. Rows
// scheduled for later (outbox_deliver_at) and rows in flight are not in the backlog. It
// also prints the inbox table's entries per consumer, the duplicates they skipped and
// the oldest one's age (package inbox), read with bounded reads (outbox.Inbox.InboxStats:
// a consumer with more than 10,000 entries shows lower bounds). Duplicates are counted on their entry when the
// duplicate's transaction commits, so the figure covers the entries retention keeps.
//
// --json prints one object: stats {table, dialect, lanes, now, eligible, parked,
// oldest_age_seconds, max_lane, lane_mismatch, per_lane: [{lane (-1 = unordered), ordered,
// eligible, oldest_eligible, oldest_age_seconds}], inbox: null (no table) or {table,
// outdated (set, with no figures, when the table lacks a column: the ALTER to run),
// error (set, with no figures, when the section could not be read: permission denied,
// timed out; the outbox figures stand and the exit status is 0), partial (entries and
// duplicates are lower bounds), more_consumers, entries, duplicates,
// oldest_age_seconds, consumers: [{consumer, entries, capped, duplicates, oldest (null
// when capped), oldest_age_seconds}]}}; parked list [{id, message_uuid, lane,
// ordering_key, transport, destination, message_type, tenant_id, attempts, last_error,
// created_at, deliver_at, body_bytes}]; parked requeue/purge {action, rows}; leases {now,
// members, held: {owner: lanes}, leases: [{lane, owner, token, expires_at, live}]}; find
// {table, now, message_uuid, ordering_key, topic, since, until, rows: [{id, message_uuid,
// state, lane, ordering_key, transport, destination, message_type, tenant_id,
// created_at, deliver_at, attempts, last_error, claim: null or {token, expires_at, live},
// lane_lease: null or {lane, owner, token, expires_at, live}, metadata}], more, inbox:
// [{consumer, processed_at, duplicates}], inbox_table, not_in_outbox, hint}. Times are
// RFC 3339 in UTC.
//
// serve runs the web dashboard (package dashboard) until interrupted, on
// 127.0.0.1:8080 unless -listen names another address. It has no authentication of its
// own: on loopback only the machine's users reach it (an SSH tunnel brings it to a
// laptop); a non-loopback -listen prints a warning. It is read-only unless
// -allow-mutations is given; requeues and purges are then logged to stderr. -timeout
// bounds each request's queries.
//
// Exit status: 0 success, 1 failure (database, missing table, ...), 2 usage error.
package main
