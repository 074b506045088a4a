// Package chaos holds the test scaffolding of the forwarder's end-to-end, crash and
// benchmark tests: an in-process Kafka cluster (kfake) with Watermill publishers and
// subscribers configured the way production code would be, RabbitMQ helpers that declare
// queues before anything is published (RabbitMQ drops unroutable messages silently),
// a delivery recorder that checks per-key order under at-least-once delivery, a wrapper
// that makes a target publisher fail on demand, a subprocess helper that runs a forwarder
// in a child process so it can be SIGKILLed, and MariaDB helpers that cut or restart the
// database under a running forwarder.
//
// It depends on nothing of package forwarder, so that the forwarder's own tests can use it
// while the forwarder's API moves.
package chaos
