// Package chaos holds the scaffolding of the end-to-end, crash and benchmark tests of
// the forwarder's own tests and of the broker tests in module e2e: the engines
// (MariaDB or Oracle MySQL, PostgreSQL) with fresh tables, writers that retry like an
// application would, a delivery recorder that checks per-key order under at-least-once
// delivery, a wrapper that makes a target publisher fail on demand, a subprocess helper
// that runs a forwarder in a child process so it can be SIGKILLed, and MySQL helpers
// that cut connections or restart the server under a running forwarder.
//
// It needs no broker client: the Kafka (kfake) and RabbitMQ helpers are in module e2e
// (e2e/internal/brokers), so that the library's go.mod requires none.
package chaos
