package publisher_test

import (
	"database/sql"
	"strconv"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/postgres"
)

func init() {
	dialects = append(dialects, &dialect{
		name:   testenv.Postgres,
		driver: "pgx",
		dsn:    func(t testing.TB) string { return testenv.DSN(t, testenv.Postgres) },
		open:   func(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) },
		store: func(db *sql.DB, opts outbox.Options) (outbox.Store, error) {
			return postgres.New(db, opts)
		},
		table:  postgres.QualifiedTable,
		ph:     func(n int) string { return "$" + strconv.Itoa(n) },
		connID: "SELECT pg_backend_pid()",
		kill:   func(id int64) (string, []any) { return "SELECT pg_terminate_backend($1)", []any{id} },
	})
}
