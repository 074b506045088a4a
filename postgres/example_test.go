package postgres_test

import (
	"database/sql"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// CreateScript gives the DDL to deploy with your migration tool; it is idempotent.
func Example_createScript() {
	script, err := postgres.CreateScript(outbox.Options{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		panic(err)
	}
	for _, stmt := range strings.Split(script, ";\n") {
		if first, _, _ := strings.Cut(strings.TrimSpace(stmt), "("); first != "" {
			fmt.Println(strings.TrimSpace(first))
		}
	}
	// Output:
	// CREATE SCHEMA IF NOT EXISTS "messaging"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_lseq_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_due_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_parked_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_parkkey_ix" ON "messaging"."orders_outbox"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_outbox_lanes"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_outbox_nodes"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_inbox"
	// CREATE INDEX IF NOT EXISTS "orders_inbox_age_ix" ON "messaging"."orders_inbox"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_inbox_lease"
}

// Invalid options are refused with an error naming the field.
func Example_invalidPrefix() {
	_, err := postgres.CreateScript(outbox.Options{TablePrefix: strings.Repeat("x", 50)})
	fmt.Println(err)
	// Output:
	// outbox: invalid options: TablePrefix: is 50 bytes; at most 46 bytes (PostgreSQL identifiers are at most 63 bytes and the longest generated name adds 17)
}

// The channel a table's notifications travel on; a name over PostgreSQL's 63-byte
// limit ends in a hash.
func ExampleChannel() {
	fmt.Println(postgres.Channel(outbox.Options{Schema: "messaging", TablePrefix: "orders_"}))
	// Output:
	// outbox:messaging.orders_outbox
}

// LISTEN/NOTIFY across processes: the writer links a Notifier to its publisher, the
// forwarder listens on a dedicated connection.
func ExampleNewListener() {
	var (
		db     *sql.DB // sql.Open("pgx", dsn): the application's pool
		dsn    = "postgres://app@db:5432/app"
		target message.Publisher
		opts   = outbox.Options{TablePrefix: "orders_"}
	)
	if db == nil {
		return // this example only shows the wiring
	}
	store, err := postgres.New(db, opts)
	if err != nil {
		panic(err)
	}

	// Writer process.
	n, err := postgres.NewNotifier(db, opts, postgres.NotifierConfig{}, nil)
	if err != nil {
		panic(err)
	}
	defer n.Close()
	ob, err := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, nil)
	if err != nil {
		panic(err)
	}
	_ = ob // ob.Begin(ctx) ... tx.Commit(ctx) now notifies the forwarders

	// Forwarder process: the server or a session-mode pooler, not a transaction-mode one.
	l, err := postgres.NewListener(dsn, opts, postgres.ListenerConfig{}, nil)
	if err != nil {
		panic(err)
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": target}, forwarder.Config{Wake: l}, nil)
	if err != nil {
		panic(err)
	}
	_ = fwd // fwd.Run(ctx)
}
