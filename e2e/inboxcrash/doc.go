// Package inboxcrash holds the inbox's crash tests over RabbitMQ: a consumer with the
// inbox SIGKILLed mid-handler while the broker redelivers, and two hops (outbox ->
// RabbitMQ -> inbox + outbox -> RabbitMQ -> inbox) with the services killed. They live
// in module e2e because they need watermill-amqp, which the library does not require.
package inboxcrash
