package postgres_test

import (
	"fmt"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
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
	// CREATE INDEX IF NOT EXISTS "orders_outbox_lane_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_due_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_parked_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_parkkey_ix" ON "messaging"."orders_outbox"
	// CREATE INDEX IF NOT EXISTS "orders_outbox_claim_ix" ON "messaging"."orders_outbox"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_outbox_lanes"
	// CREATE TABLE IF NOT EXISTS "messaging"."orders_outbox_nodes"
}

// Invalid options are refused with an error naming the field.
func Example_invalidPrefix() {
	_, err := postgres.CreateScript(outbox.Options{TablePrefix: strings.Repeat("x", 50)})
	fmt.Println(err)
	// Output:
	// outbox: invalid options: TablePrefix: is 50 bytes; at most 46 bytes (PostgreSQL identifiers are at most 63 bytes and the longest generated name adds 17)
}
