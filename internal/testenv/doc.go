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
package testenv
