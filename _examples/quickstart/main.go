// Command quickstart shows watermill-outbox end to end in one process:
//
//  1. it deploys the outbox schema and an orders table (idempotent);
//  2. it starts a Watermill router with the forwarder (outbox rows -> broker) and a
//     consumer handler (broker -> stdout);
//  3. it places orders, each in one database transaction that inserts the order row
//     and publishes an OrderPlaced message keyed by the customer (so each customer's
//     messages keep their order); one transaction is rolled back on purpose, and one
//     message is scheduled a few seconds ahead;
//  4. it waits until every committed message arrived, prints a summary and exits 0, or
//     exits 1 saying what went wrong (also after -timeout).
//
// Defaults: the local MySQL/MariaDB (root@tcp(127.0.0.1:3306)/test) and an in-process
// Kafka broker (franz-go's kfake, which speaks the real protocol). Flags and environment
// variables switch to PostgreSQL, SQL Server, a real Kafka or RabbitMQ:
//
//	go run ./_examples/quickstart                                   # MariaDB + in-process Kafka
//	go run ./_examples/quickstart -db postgres                      # local PostgreSQL
//	go run ./_examples/quickstart -db postgres -dsn 'postgres://app@db/shop'
//	go run ./_examples/quickstart -db sqlserver -dsn 'sqlserver://sa:...@127.0.0.1:1433?database=test'
//	go run ./_examples/quickstart -kafka 127.0.0.1:9092             # a real Kafka
//	go run ./_examples/quickstart -broker amqp                      # local RabbitMQ
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// settings are the command line, with environment variables as defaults.
type settings struct {
	db      string // mysql | postgres | sqlserver
	dsn     string
	broker  string // kafka | amqp
	kafka   string // "" = in-process kfake
	amqpURL string
	prefix  string
	timeout time.Duration
	delay   time.Duration
	verbose bool
}

var defaultDSN = map[string]string{
	"mysql":     "root@tcp(127.0.0.1:3306)/test",
	"postgres":  "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"sqlserver": "sqlserver://sa:Outbox_Test_2026!@127.0.0.1:1433?database=test",
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func parseSettings(args []string, stderr io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.db, "db", env("OUTBOX_DB", "mysql"), "database: mysql (MySQL/MariaDB), postgres or sqlserver (env OUTBOX_DB)")
	fs.StringVar(&s.dsn, "dsn", env("OUTBOX_DSN", ""), "DSN of the database (env OUTBOX_DSN; default: the local test server of -db)")
	fs.StringVar(&s.broker, "broker", env("OUTBOX_BROKER", "kafka"), "broker: kafka or amqp (env OUTBOX_BROKER)")
	fs.StringVar(&s.kafka, "kafka", env("OUTBOX_KAFKA", ""), "Kafka bootstrap address host:port (env OUTBOX_KAFKA; default: an in-process broker)")
	fs.StringVar(&s.amqpURL, "amqp-url", env("OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL for -broker amqp (env OUTBOX_AMQP_URL)")
	fs.StringVar(&s.prefix, "prefix", env("OUTBOX_PREFIX", "quickstart_"), "prefix of the tables this demo creates (<prefix>orders, <prefix>outbox...)")
	fs.DurationVar(&s.timeout, "timeout", 60*time.Second, "give up (exit 1) after this long")
	fs.DurationVar(&s.delay, "schedule", 3*time.Second, "how far ahead the scheduled message is due")
	fs.BoolVar(&s.verbose, "v", false, "log the library's and Watermill's messages (debug level)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if _, ok := defaultDSN[s.db]; !ok {
		return s, fmt.Errorf("-db %q: want mysql, postgres or sqlserver", s.db)
	}
	if s.dsn == "" {
		s.dsn = defaultDSN[s.db]
	}
	if s.broker != "kafka" && s.broker != "amqp" {
		return s, fmt.Errorf("-broker %q: want kafka or amqp", s.broker)
	}
	if s.timeout <= 0 || s.delay < 0 {
		return s, fmt.Errorf("-timeout must be positive and -schedule not negative")
	}
	return s, nil
}
