package publisher_test

import (
	"database/sql"
	"strconv"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
)

func init() {
	dialects = append(dialects, &dialect{
		name:   testenv.MySQL,
		driver: "mysql",
		dsn:    func(t testing.TB) string { return testenv.DSN(t, testenv.MySQL) },
		open:   func(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) },
		store: func(db *sql.DB, opts outbox.Options) (outbox.Store, error) {
			return mysql.New(db, opts)
		},
		table:  mysql.QualifiedTable,
		ph:     func(int) string { return "?" },
		connID: "SELECT CONNECTION_ID()",
		kill:   func(id int64) (string, []any) { return "KILL " + strconv.FormatInt(id, 10), nil },
	})
}
