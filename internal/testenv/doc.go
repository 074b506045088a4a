// Package testenv locates the real servers that tests talk to and decides whether a test
// without its server skips or fails.
//
// A test that needs a server reads its address from the environment:
//
//	mysql      OUTBOX_TEST_MYSQL_DSN      (go-sql-driver DSN)
//	postgres   OUTBOX_TEST_POSTGRES_DSN   (pgx URL or keyword DSN)
//	sqlserver  OUTBOX_TEST_SQLSERVER_DSN  (go-mssqldb URL)
//	amqp       OUTBOX_TEST_AMQP_URL       (amqp://user:pass@host:port/)
//	nats       OUTBOX_TEST_NATS_URL       (nats://host:port; wakeup/brokertest only)
//	redis      OUTBOX_TEST_REDIS_ADDR     (host:port; wakeup/brokertest only)
//
// Without it the test skips with a one-line reason, unless the comma-separated list in
// OUTBOX_TEST_REQUIRE names the service: then it fails, so CI never passes by skipping.
//
// The Go tests know one MySQL address. `make test` runs them with OUTBOX_TEST_MYSQL_DSN
// at MariaDB, then again (make test-mysql-oracle) with it at OUTBOX_TEST_MYSQL_ORACLE_DSN,
// Oracle MySQL; OUTBOX_TEST_MYSQL_SERVER (mariadb or mysql) names the engine each pass
// expects, which mysql's TestServerFlavor checks. Every cleanup that talks to a server
// goes through Cleanup or Bounded: it has a deadline, and a stuck one fails its test.
package testenv
