// Package brokertest runs the wake-ups of package wakeup over RabbitMQ, NATS and Redis
// Streams, in a module of its own so that their Watermill adapters stay out of the
// library's requirements. Its tests need OUTBOX_TEST_AMQP_URL, OUTBOX_TEST_NATS_URL or
// OUTBOX_TEST_REDIS_ADDR (each broker's skip without its variable, and fail when
// OUTBOX_TEST_REQUIRE names it: amqp, nats, redis) and a database
// (OUTBOX_TEST_MYSQL_DSN, OUTBOX_TEST_POSTGRES_DSN).
package brokertest
