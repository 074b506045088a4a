package examplestest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// runTimeout bounds one example run; they take 1-6 s here.
const runTimeout = 2 * time.Minute

var build struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

// binary returns the path of the built example (all are built once, together).
func binary(t *testing.T, name string) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "outbox-examples-")
		if build.err != nil {
			return
		}
		gotool := "go"
		if p, err := exec.LookPath("go"); err == nil {
			gotool = p
		} else {
			gotool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		// The examples are the other directories of this module (_examples).
		root := ".."
		entries, err := os.ReadDir(root)
		if err != nil {
			build.err = err
			return
		}
		args := []string{"build", "-o", build.dir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		for _, e := range entries {
			if e.IsDir() && e.Name() != "examplestest" {
				args = append(args, "./"+e.Name())
			}
		}
		cmd := exec.Command(gotool, args...)
		cmd.Dir = root
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("go build (the examples): %v\n%s", build.err, build.out)
	}
	return filepath.Join(build.dir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs an example with args, with a timeout, and returns its exit code and output.
func run(t *testing.T, name string, args ...string) result {
	t.Helper()
	bin := binary(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s\nstdout:\n%s\nstderr:\n%s", name, runTimeout, r.stdout, r.stderr)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s: %v", name, err)
	}
	return r
}

// mustSucceed fails unless the run exited 0 and printed every line fragment of want.
func mustSucceed(t *testing.T, r result, want ...string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", w, r.stdout, r.stderr)
		}
	}
}

// dropTables removes the tables an example created with prefix.
func dropTables(t *testing.T, driver, dsn, prefix string, tables ...string) {
	testenv.Cleanup(t, "drop the example's tables", func(ctx context.Context) error {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		q := "`"
		if driver == "pgx" {
			q = `"`
		}
		var errs []error
		for _, tbl := range tables {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+q+prefix+tbl+q); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

var outboxTables = []string{"outbox", "outbox_lanes", "outbox_nodes", "inbox", "inbox_lease"}

// quickstartSummary are the summary lines of a successful quickstart run.
var quickstartSummary = []string{
	"sent (committed)               10 messages in 9 transactions",
	"received                       10 of 10",
	"rolled back, not sent          1: its message never arrived, no order row (0 found)",
	"per-key order held             yes (alice 1,2,3,4; bob 1,2; carol 1,2,3)",
	"scheduled delivered after due  yes",
	"\nOK\n",
	"next: look at the outbox table",
}

func TestQuickstart(t *testing.T) {
	t.Run("mysql+kafka", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.MySQL)
		prefix := testenv.Prefix(t)
		dropTables(t, "mysql", dsn, prefix, append(outboxTables, "orders")...)
		r := run(t, "quickstart", "-db", "mysql", "-dsn", dsn, "-prefix", prefix)
		mustSucceed(t, r, quickstartSummary...)
		mustSucceed(t, r, "in-process Kafka (kfake)", "partition ")
	})
	t.Run("postgres+kafka", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.Postgres)
		prefix := testenv.Prefix(t)
		dropTables(t, "pgx", dsn, prefix, append(outboxTables, "orders")...)
		r := run(t, "quickstart", "-db", "postgres", "-dsn", dsn, "-prefix", prefix)
		mustSucceed(t, r, quickstartSummary...)
	})
	t.Run("mysql+amqp", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.MySQL)
		url := testenv.DSN(t, testenv.AMQP)
		prefix := testenv.Prefix(t)
		dropTables(t, "mysql", dsn, prefix, append(outboxTables, "orders")...)
		r := run(t, "quickstart", "-db", "mysql", "-dsn", dsn, "-broker", "amqp", "-amqp-url", url, "-prefix", prefix)
		mustSucceed(t, r, quickstartSummary...)
		mustSucceed(t, r, "RabbitMQ at ")
	})
	// -kafka: a broker outside the process (kfake in this test process, standing in for a
	// cluster); the quickstart creates its topic there (SubscribeInitialize).
	t.Run("mysql+kafka-address", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.MySQL)
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		prefix := testenv.Prefix(t)
		dropTables(t, "mysql", dsn, prefix, append(outboxTables, "orders")...)
		r := run(t, "quickstart", "-dsn", dsn, "-prefix", prefix, "-kafka", cluster.ListenAddrs()[0])
		mustSucceed(t, r, quickstartSummary...)
		mustSucceed(t, r, "Kafka at "+cluster.ListenAddrs()[0])
	})
	t.Run("sqlserver+kafka", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.SQLServer)
		r := run(t, "quickstart", "-db", "sqlserver", "-dsn", dsn, "-prefix", testenv.Prefix(t))
		mustSucceed(t, r, quickstartSummary...)
	})
}

// With every log line on (-v: the library's and Watermill's debug logs) and a password in
// the DSN (PostgreSQL here trusts local logins, so any password works): the password
// appears nowhere, the payloads neither.
func TestQuickstartLogsNoSecrets(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.Postgres)
	const secret = "Qs3cretPw"
	withPw := strings.Replace(dsn, "postgres://postgres@", "postgres://postgres:"+secret+"@", 1)
	if withPw == dsn {
		t.Skip("the PostgreSQL DSN is not of the form postgres://postgres@...")
	}
	prefix := testenv.Prefix(t)
	dropTables(t, "pgx", dsn, prefix, append(outboxTables, "orders")...)
	r := run(t, "quickstart", "-db", "postgres", "-dsn", withPw, "-prefix", prefix, "-v")
	mustSucceed(t, r, quickstartSummary...)
	mustSucceed(t, r, "postgres://postgres:xxxxx@", "-dsn '...'")
	if !strings.Contains(r.stderr, "level=DEBUG") {
		t.Errorf("-v logged no debug lines:\n%s", r.stderr)
	}
	for _, leak := range []string{secret, "amount_cents"} {
		if strings.Contains(r.stdout+r.stderr, leak) {
			t.Errorf("%q appears in the output", leak)
		}
	}
}

// A database that is not there: exit 1, the host named, the password not shown.
func TestQuickstartUnreachableDatabase(t *testing.T) {
	t.Parallel()
	r := run(t, "quickstart", "-dsn", "app:Sup3rSecret@tcp(127.0.0.1:1)/test", "-timeout", "20s")
	if r.code != 1 {
		t.Fatalf("exit status %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "127.0.0.1:1") || !strings.Contains(r.stderr, "app:xxxxx@tcp(127.0.0.1:1)/test") {
		t.Errorf("stderr does not name the server:\n%s", r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "Sup3rSecret") {
		t.Errorf("the password appears in the output:\n%s\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "FAIL") {
		t.Errorf("stdout lacks FAIL:\n%s", r.stdout)
	}
}

// A scheduled message that cannot come in time: the run fails (exit 1) and says what is
// missing, so a CI run of the quickstart cannot pass with messages lost.
func TestQuickstartTimeout(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.MySQL)
	prefix := testenv.Prefix(t)
	dropTables(t, "mysql", dsn, prefix, append(outboxTables, "orders")...)
	r := run(t, "quickstart", "-dsn", dsn, "-prefix", prefix, "-timeout", "10s", "-schedule", "10m")
	if r.code != 1 {
		t.Fatalf("exit status %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "timed out after 10s waiting for PaymentReminder") ||
		!strings.Contains(r.stdout, "scheduled delivered after due  NO: not received") || !strings.HasSuffix(r.stdout, "FAIL\n") {
		t.Errorf("the failure is not explained:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

func TestExistingTx(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.MySQL)
	prefix := testenv.Prefix(t)
	dropTables(t, "mysql", dsn, prefix, append(outboxTables, "accounts")...)
	mustSucceed(t, run(t, "existing-tx", "-dsn", dsn, "-prefix", prefix), "OK: existing-tx:")
}

func TestRouterMiddleware(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.MySQL)
	prefix := testenv.Prefix(t)
	dropTables(t, "mysql", dsn, prefix, append(outboxTables, "orders")...)
	mustSucceed(t, run(t, "router-middleware", "-dsn", dsn, "-prefix", prefix), "OK: router-middleware:")
}

// cqrs: a failing command leaves no row and sends no event, poisoned (MariaDB) or
// acked by AckCommandHandlingErrors (PostgreSQL).
func TestCQRS(t *testing.T) {
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.MySQL)
		prefix := testenv.Prefix(t)
		dropTables(t, "mysql", dsn, prefix, append(outboxTables, "orders")...)
		mustSucceed(t, run(t, "cqrs", "-dsn", dsn, "-prefix", prefix),
			"poisoned PlaceOrder", "OK: cqrs: 2 orders placed, 2 OrderPlaced events delivered; the failing command (poisoned after 3 attempts) left no row and sent no event")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.DSN(t, testenv.Postgres)
		prefix := testenv.Prefix(t)
		dropTables(t, "pgx", dsn, prefix, append(outboxTables, "orders")...)
		mustSucceed(t, run(t, "cqrs", "-db", "postgres", "-dsn", dsn, "-prefix", prefix, "-ack-command-errors"),
			"OK: cqrs: 2 orders placed, 2 OrderPlaced events delivered; the failing command (acked by AckCommandHandlingErrors) left no row and sent no event")
	})
}

func TestRabbitMQ(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.MySQL)
	url := testenv.DSN(t, testenv.AMQP)
	prefix := testenv.Prefix(t)
	dropTables(t, "mysql", dsn, prefix, outboxTables...)
	mustSucceed(t, run(t, "rabbitmq", "-dsn", dsn, "-amqp-url", url, "-prefix", prefix), "OK: rabbitmq:")
}

// Two services over RabbitMQ: B consumes with the inbox and publishes through the
// outbox; a redelivered message is charged once.
func TestInboxPipeline(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.MySQL)
	url := testenv.DSN(t, testenv.AMQP)
	prefix := testenv.Prefix(t)
	var tables []string
	for _, svc := range []string{"a_", "b_"} {
		for _, tb := range outboxTables {
			tables = append(tables, svc+tb)
		}
	}
	dropTables(t, "mysql", dsn, prefix, append(tables, "b_payments")...)
	mustSucceed(t, run(t, "inbox-pipeline", "-dsn", dsn, "-amqp-url", url, "-prefix", prefix),
		"service B charged 5 payments (5 rows), skipped 1 duplicate",
		"the sink received 5 PaymentCharged messages for 5 orders",
		"OK: inbox-pipeline:")
}

// The kafka example is written for the compose broker; here it runs against an
// in-process one (kfake speaks the protocol, consumer groups included).
func TestKafka(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.MySQL)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	prefix := testenv.Prefix(t)
	dropTables(t, "mysql", dsn, prefix, outboxTables...)
	mustSucceed(t, run(t, "kafka", "-dsn", dsn, "-brokers", strings.Join(cluster.ListenAddrs(), ","), "-prefix", prefix), "OK: kafka:")
}

func TestSQLServer(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.SQLServer)
	mustSucceed(t, run(t, "sqlserver", "-dsn", dsn), "OK: sqlserver:")
}
