package forwarder

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// openReadUncommitted opens a pool on the MySQL test server whose sessions default to
// READ UNCOMMITTED, as a DSN setting some shops use does (MariaDB names the variable
// tx_isolation, Oracle MySQL 8 and later transaction_isolation).
func openReadUncommitted(t *testing.T) *sql.DB {
	t.Helper()
	dsn := testenv.DSN(t, testenv.MySQL)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, name := range []string{"tx_isolation", "transaction_isolation"} {
		db, err := sql.Open("mysql", dsn+sep+name+"="+url.QueryEscape("'READ-UNCOMMITTED'"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var level string
		err = db.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&level)
		cancel()
		if err == nil && level == "READ-UNCOMMITTED" {
			t.Cleanup(func() { db.Close() })
			return db
		}
		db.Close()
	}
	t.Fatal("cannot open a READ UNCOMMITTED pool on the MySQL test server")
	return nil
}

// The pool's sessions read uncommitted rows. An application's transaction writes an
// ordered message into the outbox (Attach and Flush), holds it 2 s and rolls back: the
// forwarder, reading its lanes through that pool, must never send it (on MariaDB it
// did: lane heads were read at the pool's isolation level). A committed row is sent.
func TestRolledBackRowNeverSentFromReadUncommittedPool(t *testing.T) {
	db := openReadUncommitted(t)
	tb := newTable(t, dialects[0], 8)
	st, err := tb.d.newStore(db, tb.opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	_, stop := start(t, st, Targets{"": rec}, fastConfig())
	defer stop()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, tx, []outbox.Record{tb.row("t", "k", "rolled-back")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the lane scout and workers poll meanwhile
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	tb.insert(t, tb.row("t", "k", "committed"))
	waitFor(t, 20*time.Second, "the committed row", func() bool { return len(rec.got()) > 0 })
	time.Sleep(100 * time.Millisecond)
	for _, p := range rec.got() {
		if string(p.msg.Payload) != "committed" {
			t.Fatalf("sent %q, a row whose transaction rolled back", p.msg.Payload)
		}
	}
}
