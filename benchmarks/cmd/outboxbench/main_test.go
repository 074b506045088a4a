package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// The harness re-executes its own binary for the out-of-process measurements; under
// `go test` that binary is the test binary, so the child roles start here.
func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// configured returns the service's address from the environment, "" when it is not
// set and not required (OUTBOX_TEST_REQUIRE), and fails the test when it is required
// but missing.
func configured(t *testing.T, service string) string {
	t.Helper()
	v := os.Getenv(testenv.EnvVar(service))
	if v == "" && testenv.Required(service) {
		t.Fatalf("%s is required (OUTBOX_TEST_REQUIRE) but %s is not set", service, testenv.EnvVar(service))
	}
	return v
}

// TestShortHarness runs the whole harness in -short mode (what CI runs, so that it
// cannot rot) against every configured database and checks that each section of each
// database printed its table and RESULT lines, and nothing failed.
func TestShortHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("the short harness takes a few minutes; skipped with -short")
	}
	var dbs []string
	args := []string{"-short"}
	if dsn := configured(t, testenv.MySQL); dsn != "" {
		dbs = append(dbs, "mysql")
		args = append(args, "-mysql-dsn", dsn)
	}
	if dsn := configured(t, testenv.Postgres); dsn != "" {
		dbs = append(dbs, "postgres")
		args = append(args, "-postgres-dsn", dsn)
	}
	if len(dbs) == 0 {
		t.Skip("neither OUTBOX_TEST_MYSQL_DSN nor OUTBOX_TEST_POSTGRES_DSN is set")
	}
	amqpURL := configured(t, testenv.AMQP)
	args = append(args, "-db", strings.Join(dbs, ","), "-amqp-url", amqpURL)

	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	out := stdout.String()
	t.Logf("outboxbench %s:\n%s\n%s", strings.Join(args, " "), out, stderr.String())
	if code != 0 {
		t.Fatalf("outboxbench exited with %d", code)
	}
	if strings.Contains(out, "FAILED") {
		t.Fatal("a section failed")
	}
	for _, db := range dbs {
		for _, sec := range allSections {
			if !strings.Contains(out, "\nRESULT "+db+"/"+sec+"/") {
				t.Errorf("no RESULT line for %s/%s", db, sec)
			}
		}
		if amqpURL != "" && !strings.Contains(out, "\nRESULT "+db+"/brokers/rabbitmq/") {
			t.Errorf("no RabbitMQ RESULT line for %s", db)
		}
		if !strings.Contains(out, "\nRESULT "+db+"/brokers/kafka/") {
			t.Errorf("no Kafka RESULT line for %s", db)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "RESULT" && (len(f) != 4 || f[2] == "NaN" || f[2] == "+Inf") {
			t.Errorf("malformed RESULT line %q", line)
		}
	}
}

func TestPercentileAndMedian(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := percentile(v, 0.5); got != 5 {
		t.Errorf("p50 = %v, want 5", got)
	}
	if got := percentile(v, 0.99); got != 10 {
		t.Errorf("p99 = %v, want 10", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
}

// A list flag keeps the names it is given, in order, and refuses one it does not know,
// naming it and the choices; run exits with 2 without touching a database.
func TestListFlags(t *testing.T) {
	got, err := listFlag(" kafka,, rabbitmq ", "broker", allBrokers)
	if err != nil || len(got) != 2 || got[0] != "kafka" || got[1] != "rabbitmq" {
		t.Fatalf("listFlag = %v, %v", got, err)
	}
	if _, err := listFlag("kafka,nats", "broker", allBrokers); err == nil || !strings.Contains(err.Error(), `unknown broker "nats" (have rabbitmq, kafka, kafka_batch)`) {
		t.Fatalf("listFlag with an unknown broker: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-sections", "drain,nope"}, `unknown section "nope"`},
		{[]string{"-brokers", ""}, "no broker listed (have rabbitmq, kafka, kafka_batch)"},
		{[]string{"-db", "postgres,oracle"}, `unknown database "oracle" (have mysql, postgres)`},
		{[]string{"-db", " , "}, "no database listed"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), c.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("run %q = %d, %q; want exit 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// -cpustats reads this process and the database server's processes from /proc.
func TestReadCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	before, err := readCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the process's CPU time moves (it counts in 10 ms ticks), with a deadline
	// so that a broken reading fails instead of hanging.
	var after cpuSample
	for deadline := time.Now().Add(10 * time.Second); after.self <= before.self; {
		if time.Now().After(deadline) {
			t.Fatalf("10 s of busy loop moved this process's CPU time from %v to %v", before.self, after.self)
		}
		if after, err = readCPU(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := procStat("0"); err == nil {
		t.Error("procStat of a process that does not exist: no error")
	}
}
