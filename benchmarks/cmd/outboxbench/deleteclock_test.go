package main

import (
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// The store wrapper that times our drains leaves the forwarder's configuration as the
// bare store gives it: row locks (outbox.BatchLocker) and the store's claimer count
// (outbox.ClaimersHint: 3 on PostgreSQL). No server is needed: a store and a forwarder
// are built without a connection.
func TestDeleteClockKeepsTheForwarderConfig(t *testing.T) {
	for _, c := range []struct {
		driver string
		store  func(db *sql.DB) (outbox.Store, error)
	}{
		{"mysql", func(db *sql.DB) (outbox.Store, error) { return mysql.New(db, outbox.Options{}) }},
		{"pgx", func(db *sql.DB) (outbox.Store, error) { return postgres.New(db, outbox.Options{}) }},
	} {
		t.Run(c.driver, func(t *testing.T) {
			db, err := sql.Open(c.driver, map[string]string{"mysql": "u@tcp(127.0.0.1:1)/x", "pgx": "postgres://u@127.0.0.1:1/x"}[c.driver])
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			st, err := c.store(db)
			if err != nil {
				t.Fatal(err)
			}
			clock, err := newDeleteClock(st)
			if err != nil {
				t.Fatal(err)
			}
			bare, err := forwarder.New(st, forwarder.Targets{"": &nopPublisher{}}, forwarder.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wrapped, err := forwarder.New(clock, forwarder.Targets{"": &nopPublisher{}}, forwarder.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, w := bare.Config(), wrapped.Config()
			if w.TokenClaims != b.TokenClaims || w.Claimers != b.Claimers || w.ClaimBatch != b.ClaimBatch || w.InFlight != b.InFlight {
				t.Errorf("wrapped store: TokenClaims %v, Claimers %d, ClaimBatch %d, InFlight %d; bare store: %v, %d, %d, %d",
					w.TokenClaims, w.Claimers, w.ClaimBatch, w.InFlight, b.TokenClaims, b.Claimers, b.ClaimBatch, b.InFlight)
			}
		})
	}
}
