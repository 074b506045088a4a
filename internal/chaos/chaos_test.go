package chaos_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

func TestRecorderOrderAndDuplicates(t *testing.T) {
	r := chaos.NewRecorder()
	r.Record("a0", "a", 0)
	r.Record("a1", "a", 1)
	r.Record("a0", "a", 0) // replay after a crash: duplicate, not a violation
	r.Record("a1", "a", 1)
	r.Record("a2", "a", 2)
	r.Record("b1", "b", 1)
	r.Record("b0", "b", 0) // first delivery of b0 after b1: violation
	r.Record("u", "", -1)
	s := r.Summary()
	if s.Deliveries != 8 || s.Unique != 6 || s.Duplicates != 2 || len(s.Violations) != 1 {
		t.Fatalf("summary %v %v", s, s.Violations)
	}
	if m := r.Missing([]string{"a0", "zz", "b0"}); len(m) != 1 || m[0] != "zz" {
		t.Fatalf("missing %v", m)
	}
}

func TestMariaDBKillUserConnections(t *testing.T) {
	dsn := testenv.DSN(t, testenv.MySQL)
	root, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() }) // after MariaDBUser's cleanup, which uses it
	user, udsn := chaos.MariaDBUser(t, root, dsn)
	db, err := sql.Open("mysql", udsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(4)
	ctx := context.Background()
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		if err := conns[i].PingContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	n, err := chaos.KillUserConnections(ctx, root, user)
	if err != nil || n != 3 {
		t.Fatalf("killed %d: %v", n, err)
	}
	// The pool notices and reconnects on its own.
	var one int
	for i := 0; i < 5; i++ {
		if err = db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no recovery after kill: %v", err)
	}
}
