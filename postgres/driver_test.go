package postgres_test

import (
	"database/sql"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// TestNewRefusesOtherDrivers: the pgx rule is enforced. A pool of another driver is
// refused by New with an error naming it and the fix; pgx's driver and OpenDB's
// connector are accepted (no I/O: nothing is connected).
func TestNewRefusesOtherDrivers(t *testing.T) {
	other, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = postgres.New(other, outbox.Options{})
	if err == nil || !strings.Contains(err.Error(), "*mysql.MySQLDriver") || !strings.Contains(err.Error(), `sql.Open("pgx", dsn)`) {
		t.Fatalf("New over a non-pgx pool: %v; want a refusal naming the driver and the fix", err)
	}
	pgx, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pgx.Close()
	if _, err := postgres.New(pgx, outbox.Options{}); err != nil {
		t.Fatalf("New over pgx: %v", err)
	}
	wrapped, err := postgres.OpenDB("postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer wrapped.Close()
	if _, err := postgres.New(wrapped, outbox.Options{}); err != nil {
		t.Fatalf("New over OpenDB's pool: %v", err)
	}
}
