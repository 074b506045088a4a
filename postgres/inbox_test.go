package postgres_test

import (
	"errors"
	"strings"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// An inbox table created before the duplicates column: recording fails with an error
// that names the ALTER to run, and so does InboxStats.
func TestInboxTablePredatesDuplicates(t *testing.T) {
	db := openDB(t, "")
	ctx := t.Context()
	s := newStore(t, db, outbox.Options{})
	table := postgres.QualifiedTable(s.Options(), s.Options().InboxTable())
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+table+" DROP COLUMN duplicates"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	_, err = s.RecordInbox(ctx, tx, "c", "m", base)
	want := "ALTER TABLE " + table + " ADD COLUMN duplicates bigint NOT NULL DEFAULT 0"
	if !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), want) {
		t.Fatalf("RecordInbox on the old table: %v; want ErrSchemaOutdated naming %q", err, want)
	}
	if _, err := s.InboxStats(ctx); !errors.Is(err, outbox.ErrSchemaOutdated) || !strings.Contains(err.Error(), want) {
		t.Fatalf("InboxStats on the old table: %v; want an error naming %q", err, want)
	}
}
