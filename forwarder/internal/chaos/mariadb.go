package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// MariaDBUser creates a database user private to the test (granted everything on the
// DSN's database) and returns its name and a DSN that logs in as it, so that the test can
// kill exactly its own connections (KillUserConnections) without touching other tests'.
// The user is dropped at the end of the test.
func MariaDBUser(t testing.TB, root *sql.DB, rootDSN string) (user, dsn string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(rootDSN)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	if cfg.DBName == "" {
		t.Fatalf("DSN %q names no database", rootDSN)
	}
	user = UniqueName("oc_")
	pass := UniqueName("pw")
	ctx := context.Background()
	hosts := []string{"%", "localhost", "127.0.0.1"}
	for _, h := range hosts {
		if _, err := root.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY '%s'", user, h, pass)); err != nil {
			t.Fatalf("create user: %v", err)
		}
		if _, err := root.ExecContext(ctx, fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%s'", cfg.DBName, user, h)); err != nil {
			t.Fatalf("grant: %v", err)
		}
	}
	testenv.Cleanup(t, "drop the test's database user", func(ctx context.Context) error {
		_, _ = KillUserConnections(ctx, root, user)
		var errs []error
		for _, h := range hosts {
			if _, err := root.ExecContext(ctx, fmt.Sprintf("DROP USER IF EXISTS '%s'@'%s'", user, h)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	cfg.User, cfg.Passwd = user, pass
	return user, cfg.FormatDSN()
}

// KillUserConnections kills every server connection of user and returns how many it
// killed. Connections that end while it runs are not errors.
func KillUserConnections(ctx context.Context, root *sql.DB, user string) (int, error) {
	rows, err := root.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE user = ?", user)
	if err != nil {
		return 0, fmt.Errorf("list connections of %s: %w", user, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		_, err := root.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1094 { // unknown thread: it ended meanwhile
			continue
		}
		if err != nil {
			return n, fmt.Errorf("kill %d: %w", id, err)
		}
		n++
	}
	return n, nil
}

// RestartMariaDB stops the local MariaDB server (mysqladmin shutdown), keeps it down for
// down, starts it again and waits until addr answers a ping through db. It is the full
// chaos variant only: it disturbs everything else using the server.
func RestartMariaDB(ctx context.Context, db *sql.DB, addr string, down time.Duration) error {
	if out, err := exec.CommandContext(ctx, "mysqladmin", "-uroot", "shutdown").CombinedOutput(); err != nil {
		return fmt.Errorf("mysqladmin shutdown: %v: %s", err, out)
	}
	// Wait until the port is closed, then keep it down.
	for i := 0; i < 300; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(down)
	return StartMariaDB(ctx, db)
}

// StartMariaDB starts the local server if it is not running and waits (up to 60 s) until
// db answers.
func StartMariaDB(ctx context.Context, db *sql.DB) error {
	out, err := exec.CommandContext(ctx, "start-stop-daemon", "--start", "--oknodo", "--background",
		"--exec", "/usr/sbin/mariadbd", "--", "--user=mysql").CombinedOutput() // as scripts/services does
	if err != nil {
		return fmt.Errorf("start mariadbd: %v: %s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadb did not come back: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
