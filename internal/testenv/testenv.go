package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Service names as used in OUTBOX_TEST_REQUIRE.
const (
	MySQL     = "mysql"
	Postgres  = "postgres"
	SQLServer = "sqlserver"
	AMQP      = "amqp"
	NATS      = "nats"
	Redis     = "redis"
)

var envVars = map[string]string{
	MySQL:     "OUTBOX_TEST_MYSQL_DSN",
	Postgres:  "OUTBOX_TEST_POSTGRES_DSN",
	SQLServer: "OUTBOX_TEST_SQLSERVER_DSN",
	AMQP:      "OUTBOX_TEST_AMQP_URL",
	NATS:      "OUTBOX_TEST_NATS_URL",
	Redis:     "OUTBOX_TEST_REDIS_ADDR",
}

// EnvVar returns the environment variable that holds service's address.
func EnvVar(service string) string {
	v, ok := envVars[service]
	if !ok {
		panic("testenv: unknown service " + service)
	}
	return v
}

// Required reports whether OUTBOX_TEST_REQUIRE names service.
func Required(service string) bool {
	for _, s := range strings.Split(os.Getenv("OUTBOX_TEST_REQUIRE"), ",") {
		if strings.EqualFold(strings.TrimSpace(s), service) {
			return true
		}
	}
	return false
}

// DSN returns service's address, or skips the test (fails it when the service is
// required) when none is configured.
func DSN(t testing.TB, service string) string {
	t.Helper()
	v := os.Getenv(EnvVar(service))
	if v != "" {
		return v
	}
	if Required(service) {
		t.Fatalf("%s is required (OUTBOX_TEST_REQUIRE) but %s is not set", service, EnvVar(service))
	}
	t.Skipf("%s not set: skipping %s test", EnvVar(service), service)
	return ""
}

// Unavailable ends a test whose configured server cannot be reached: it always fails,
// since a configured but dead server is a broken environment, not an absent one.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	t.Fatalf("%s configured by %s is unreachable: %v", service, EnvVar(service), err)
}

// Prefix returns a fresh table prefix ("t_<12 hex>_") so that each test owns its tables
// and tests can run in parallel.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t_" + hex.EncodeToString(b[:]) + "_"
}
