// Command outboxbench compares watermill-outbox with Watermill's own outbox
// (watermill-sql v4 and components/forwarder) and with hand-written raw baselines, on
// MariaDB/MySQL and PostgreSQL, in one run on one machine.
//
//	go run ./cmd/outboxbench                    # full run, both databases (make bench)
//	go run ./cmd/outboxbench -short -runs 1     # small counts (CI, make bench-short)
//	go run ./cmd/outboxbench -db postgres -sections drain,latency
//	go run ./cmd/outboxbench -db postgres -sections brokers -brokers kafka -cpuprofile kafka.prof
//
// Sections: publish (N messages in one business transaction), drain (a queued backlog
// into a no-op publisher), brokers (forward to RabbitMQ and to Kafka/kfake), latency
// (commit to publish), scaling (1, 2, 4 forwarders on one table), memory (peak RSS and
// allocations draining a large backlog, in a child process).
//
// Each section prints a markdown table (median of -runs repetitions with the min–max
// spread) and one line per figure, `RESULT <db>/<section>/<figure> <median> <unit>`.
// Ratios are computed within each repetition from contenders run back to back, then
// their median is taken.
//
// -cpuprofile writes a CPU profile of the whole run (with several databases, one per
// database: <file>.<db>); the brokers section runs each contender under the pprof
// label "contender" (<broker>/raw, /loop, /ours-token, /ours-locks, /ours-ordered), so
// that `go tool pprof -tagfocus contender=kafka/loop` shows one contender's share (its
// fill included; -ignore fillOutbox leaves it out).
// -cpustats adds, to the brokers section, each drain's CPU seconds per 100,000 rows in
// this process and in the database server's processes on this machine (read from
// /proc, Linux only; the fill is not counted).
//
// Each database's sections run in a process of their own (this binary re-executed),
// and each section on a new connection pool: a section never measures what the one
// before it left in the process or in the server's connections.
//
// Services come from flags, defaulting to the OUTBOX_TEST_* variables the tests use,
// then to this machine's local servers. The process re-executes itself for the
// out-of-process measurements (a polling forwarder, the memory drain).
package main
