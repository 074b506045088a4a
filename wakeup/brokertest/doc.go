// Package brokertest runs the wake-ups of package wakeup over NATS and Redis Streams, in
// a module of its own so that their Watermill adapters stay out of the library's
// requirements. Its tests need OUTBOX_TEST_NATS_URL or OUTBOX_TEST_REDIS_ADDR (they skip
// without, and fail under OUTBOX_TEST_REQUIRE=nats,redis) and a database
// (OUTBOX_TEST_MYSQL_DSN, OUTBOX_TEST_POSTGRES_DSN).
package brokertest
