package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// RestartMySQL stops the MySQL or MariaDB server behind db (the SHUTDOWN statement,
// which both engines take from a privileged session), keeps it down for down once addr
// stops answering, starts it again with `scripts/services service` (service is "mysql"
// for MariaDB, "mysql-oracle" for Oracle MySQL: the script knows how each runs here) and
// waits until db answers a ping. It is the full chaos variant only: it disturbs
// everything else using the server.
func RestartMySQL(ctx context.Context, db *sql.DB, addr string, down time.Duration, service string) error {
	if _, err := db.ExecContext(ctx, "SHUTDOWN"); err != nil {
		return fmt.Errorf("SHUTDOWN: %w", err)
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
	return StartMySQL(ctx, db, service)
}

// StartMySQL runs `scripts/services service` (which starts the local server unless it
// answers) and waits (up to 60 s) until db answers.
func StartMySQL(ctx context.Context, db *sql.DB, service string) error {
	script, err := servicesScript()
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, script, service).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", script, service, err, out)
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
			return fmt.Errorf("%s did not come back: %w", service, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// servicesScript finds scripts/services above the working directory (a test runs in its
// package's directory).
func servicesScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "services")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/services not found above the working directory")
		}
		dir = parent
	}
}
