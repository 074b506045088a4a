package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// openDB opens the test database through pgx/stdlib, with the session TimeZone set when
// tz is not empty.
func openDB(t testing.TB, tz string) *sql.DB {
	t.Helper()
	db, err := openWith(testenv.DSN(t, testenv.Postgres), tz)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openWith(dsn, tz string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if tz != "" {
		cfg.RuntimeParams["timezone"] = tz
	}
	return stdlib.OpenDB(*cfg), nil
}

// newStore builds a store with fresh tables (dropped at the end of the test).
func newStore(t testing.TB, db *sql.DB, opts outbox.Options) *postgres.Store {
	t.Helper()
	if opts.TablePrefix == "" {
		opts.TablePrefix = testenv.Prefix(t)
	}
	s, err := postgres.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		o := s.Options()
		var errs []error
		for _, tbl := range o.TableNames() {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+postgres.QualifiedTable(o, tbl)); err != nil {
				errs = append(errs, fmt.Errorf("drop %s: %w", tbl, err))
			}
		}
		return errors.Join(errs...)
	})
	if err := s.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
