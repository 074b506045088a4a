package testenv_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// recorder stands in for the testing.TB of a test that needs a server, so that skip and
// fail outcomes can be observed without skipping or failing this test.
type recorder struct {
	testing.TB
	outcome, msg string
}

type stop struct{}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.outcome, r.msg = "fail", fmt.Sprintf(format, args...)
	panic(stop{})
}
func (r *recorder) Skipf(format string, args ...any) {
	r.outcome, r.msg = "skip", fmt.Sprintf(format, args...)
	panic(stop{})
}

func dsn(t *testing.T, service string) (value string, r *recorder) {
	r = &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stop); !ok {
				panic(p)
			}
		}
	}()
	return testenv.DSN(r, service), r
}

func TestDSN(t *testing.T) {
	t.Setenv("OUTBOX_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test")
	t.Setenv("OUTBOX_TEST_POSTGRES_DSN", "")
	t.Setenv("OUTBOX_TEST_SQLSERVER_DSN", "")
	t.Setenv("OUTBOX_TEST_REQUIRE", " Postgres ,amqp")

	if v, r := dsn(t, testenv.MySQL); v != "root@tcp(127.0.0.1:3306)/test" || r.outcome != "" {
		t.Fatalf("set DSN: got %q, %s %q", v, r.outcome, r.msg)
	}
	if _, r := dsn(t, testenv.SQLServer); r.outcome != "skip" || !strings.Contains(r.msg, "OUTBOX_TEST_SQLSERVER_DSN not set") {
		t.Fatalf("unset, not required: %s %q, want a skip naming the variable", r.outcome, r.msg)
	}
	if _, r := dsn(t, testenv.Postgres); r.outcome != "fail" || !strings.Contains(r.msg, "OUTBOX_TEST_POSTGRES_DSN") || !strings.Contains(r.msg, "OUTBOX_TEST_REQUIRE") {
		t.Fatalf("unset, required: %s %q, want a failure naming the variables", r.outcome, r.msg)
	}
}

func TestRequired(t *testing.T) {
	t.Setenv("OUTBOX_TEST_REQUIRE", "mysql, POSTGRES,,amqp ")
	for service, want := range map[string]bool{
		testenv.MySQL: true, testenv.Postgres: true, testenv.AMQP: true, testenv.SQLServer: false,
	} {
		if got := testenv.Required(service); got != want {
			t.Errorf("Required(%s) = %v, want %v", service, got, want)
		}
	}
	t.Setenv("OUTBOX_TEST_REQUIRE", "")
	if testenv.Required(testenv.MySQL) {
		t.Error("empty OUTBOX_TEST_REQUIRE requires mysql")
	}
}

func TestEnvVar(t *testing.T) {
	for service, want := range map[string]string{
		testenv.MySQL:     "OUTBOX_TEST_MYSQL_DSN",
		testenv.Postgres:  "OUTBOX_TEST_POSTGRES_DSN",
		testenv.SQLServer: "OUTBOX_TEST_SQLSERVER_DSN",
		testenv.AMQP:      "OUTBOX_TEST_AMQP_URL",
	} {
		if got := testenv.EnvVar(service); got != want {
			t.Errorf("EnvVar(%s) = %s, want %s", service, got, want)
		}
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "unknown service oracle") {
			t.Fatalf("EnvVar(oracle) panic = %v", p)
		}
	}()
	testenv.EnvVar("oracle")
}

func TestUnavailableFails(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		testenv.Unavailable(r, testenv.AMQP, fmt.Errorf("connection refused"))
	}()
	if r.outcome != "fail" || !strings.Contains(r.msg, "OUTBOX_TEST_AMQP_URL") || !strings.Contains(r.msg, "connection refused") {
		t.Fatalf("Unavailable: %s %q", r.outcome, r.msg)
	}
}

func TestPrefix(t *testing.T) {
	re := regexp.MustCompile(`^t_[0-9a-f]{12}_$`)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		p := testenv.Prefix(t)
		if !re.MatchString(p) {
			t.Fatalf("Prefix() = %q", p)
		}
		if seen[p] {
			t.Fatalf("Prefix() repeated %q", p)
		}
		seen[p] = true
	}
}
