package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

type config struct {
	short    bool
	runs     int
	dbs      []string
	sections []string
	dsn      map[string]string
	amqpURL  string
	brokers  []string // the brokers section's targets (allBrokers)
	cpuStats bool     // the brokers section reports each drain's CPU use

	publishTx      map[int]int // messages per transaction -> transactions per run
	drainRows      int
	drainLimit     time.Duration // a drain still running after this is cut short
	brokerRows     int           // RabbitMQ's; Kafka forwards kafkaRowsFactor times as many
	slowRows       int
	stallRows      int
	latencySamples int
	burstCommits   int // commits of the latency section's burst
	burstRounds    int // bursts per variant and run
	scaleRows      int
	memoryRows     int
	memoryRuns     int // 0: runs
	memoryLimit    time.Duration
}

var allBrokers = []string{"rabbitmq", "kafka", "kafka_batch"}

var allDatabases = []string{"mysql", "postgres"}

var allSections = []string{"publish", "drain", "brokers", "slow", "stall", "latency", "scaling", "memory"}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func main() {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole harness; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outboxbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "small counts (CI): finishes in a few minutes")
	runs := fs.Int("runs", 0, "repetitions per figure (default 3, or 1 with -short)")
	dbs := fs.String("db", "mysql,postgres", "databases: mysql, postgres")
	sections := fs.String("sections", strings.Join(allSections, ","), "sections to run")
	mysqlDSN := fs.String("mysql-dsn", envOr("OUTBOX_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test"), "MariaDB/MySQL DSN")
	pgDSN := fs.String("postgres-dsn", envOr("OUTBOX_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
	amqpURL := fs.String("amqp-url", envOr("OUTBOX_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL (\"\" skips the RabbitMQ figures)")
	drainRows := fs.Int("drain-rows", 0, "override the drain backlog size")
	memoryRuns := fs.Int("memory-runs", 0, "repetitions of the memory section (default 1, or -runs with -short)")
	brokers := fs.String("brokers", strings.Join(allBrokers, ","), "the brokers section's targets")
	cpuStats := fs.Bool("cpustats", false, "the brokers section also reports each drain's CPU seconds per 100,000 rows, in this process and in the database server's processes on this machine (Linux /proc)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file, or with several databases to <file>.<db> each (the brokers section labels each contender: pprof -tagfocus contender=kafka/ours-locks)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := config{
		short: *short, runs: *runs, dsn: map[string]string{"mysql": *mysqlDSN, "postgres": *pgDSN},
		amqpURL: *amqpURL,
	}
	var err error
	if cfg.dbs, err = listFlag(*dbs, "database", allDatabases); err != nil {
		fmt.Fprintf(stderr, "outboxbench: %v\n", err)
		return 2
	}
	if cfg.sections, err = listFlag(*sections, "section", allSections); err != nil {
		fmt.Fprintf(stderr, "outboxbench: %v\n", err)
		return 2
	}
	if cfg.brokers, err = listFlag(*brokers, "broker", allBrokers); err != nil {
		fmt.Fprintf(stderr, "outboxbench: %v\n", err)
		return 2
	}
	if cfg.cpuStats = *cpuStats; cfg.cpuStats {
		if _, err := readCPU(); err != nil {
			fmt.Fprintf(stderr, "outboxbench: %v\n", err)
			return 2
		}
	}
	if cfg.short {
		if cfg.runs == 0 {
			cfg.runs = 1
		}
		cfg.publishTx = map[int]int{1: 40, 64: 10, 1000: 2}
		cfg.drainRows, cfg.drainLimit = 5_000, 20*time.Second
		cfg.brokerRows = 1_000
		cfg.slowRows = 2_000
		cfg.stallRows = 5_000
		cfg.latencySamples = 60
		cfg.burstCommits, cfg.burstRounds = 2_000, 2
		cfg.scaleRows = 5_000
		cfg.memoryRows = 50_000
		cfg.memoryLimit = 20 * time.Second
	} else {
		if cfg.runs == 0 {
			cfg.runs = 3
		}
		cfg.publishTx = map[int]int{1: 300, 64: 60, 1000: 40}
		cfg.drainRows, cfg.drainLimit = 100_000, 60*time.Second
		cfg.brokerRows = 20_000
		cfg.slowRows = 20_000
		cfg.stallRows = 100_000
		cfg.latencySamples = 500
		cfg.burstCommits, cfg.burstRounds = 10_000, 4
		cfg.scaleRows = 20_000
		cfg.memoryRows = 1_000_000
		// One 1,000,000-row drain takes minutes: peak RSS and allocations per message
		// are not timing figures, and a single run keeps `make bench` under an hour.
		cfg.memoryRuns = 1
		cfg.memoryLimit = 3 * time.Minute
	}
	// Several databases: each runs in a process of its own (dbprocess.go).
	separate := len(cfg.dbs) > 1 && !inDatabaseProcess()
	if *cpuProfile != "" && !separate {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "outboxbench: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "outboxbench: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *memoryRuns > 0 {
		cfg.memoryRuns = *memoryRuns
	}
	if cfg.memoryRuns == 0 {
		cfg.memoryRuns = cfg.runs
	}
	if *drainRows > 0 {
		cfg.drainRows = *drainRows
	}
	if cfg.runs < 1 {
		fmt.Fprintln(stderr, "outboxbench: -runs must be at least 1")
		return 2
	}

	start := time.Now()
	if !inDatabaseProcess() {
		fmt.Fprintf(stdout, "# outboxbench %s\n\n", start.UTC().Format(time.RFC3339))
		mode := "full"
		if cfg.short {
			mode = "short"
		}
		fmt.Fprintf(stdout, "mode %s, %d run(s) per figure; %s, GOMAXPROCS %d, %d CPUs, %s RAM\n",
			mode, cfg.runs, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), memTotal())
	}

	failed := false
	for _, name := range cfg.dbs {
		if separate {
			if ctx.Err() == nil && runInProcess(ctx, name, args, *cpuProfile, stdout, stderr) {
				failed = true
			}
			continue
		}
		if !runDatabase(ctx, name, cfg, stdout, stderr) {
			failed = true
		}
	}
	if !inDatabaseProcess() {
		fmt.Fprintf(stdout, "\ntotal %s\n", time.Since(start).Round(time.Second))
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// runDatabase runs the sections of cfg on the database name in this process, each on
// a new pool; it reports whether every section succeeded.
func runDatabase(ctx context.Context, name string, cfg config, stdout, stderr io.Writer) bool {
	e, err := openEngine(name, cfg.dsn[name])
	if err == nil {
		err = e.checkAutovacuum(ctx)
	}
	if err != nil {
		fmt.Fprintf(stdout, "\n## %s\n\nFAILED: %v\n", name, err)
		return false
	}
	defer func() { e.db.Close() }() // reopen replaces e.db
	fmt.Fprintf(stdout, "\n## %s (%s)\n", name, e.version(ctx))
	ok := true
	for i, s := range cfg.sections {
		if ctx.Err() != nil {
			break
		}
		if i > 0 {
			if err := e.reopen(); err != nil {
				fmt.Fprintf(stdout, "\nFAILED: %v\n", err)
				return false
			}
		}
		t0 := time.Now()
		sec := runSection(ctx, s, e, cfg)
		sec.print(stdout)
		fmt.Fprintf(stderr, "outboxbench: %s/%s took %s\n", name, s, time.Since(t0).Round(time.Second))
		if sec.failure != nil {
			ok = false
		}
	}
	return ok
}

// listFlag splits a comma-separated flag value into the names it lists, each one of
// allowed (what names the kind in the error); an empty list is an error too.
func listFlag(value, what string, allowed []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if !slices.Contains(allowed, v) {
			return nil, fmt.Errorf("unknown %s %q (have %s)", what, v, strings.Join(allowed, ", "))
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s listed (have %s)", what, strings.Join(allowed, ", "))
	}
	return out, nil
}

func runSection(ctx context.Context, name string, e *engine, cfg config) *section {
	var sec *section
	var err error
	switch name {
	case "publish":
		sec = newSection(e.name, name, "1. Publish path: N messages in one business transaction")
		err = publishSection(ctx, e, cfg, sec)
	case "drain":
		sec = newSection(e.name, name, fmt.Sprintf("2. Drain: %d queued messages into a no-op publisher", cfg.drainRows))
		err = drainSection(ctx, e, cfg, sec)
	case "brokers":
		sec = newSection(e.name, name, fmt.Sprintf("3. Forward %d messages to RabbitMQ, %d to Kafka (kfake)", cfg.brokerRows, kafkaRowsFactor*cfg.brokerRows))
		err = brokersSection(ctx, e, cfg, sec)
	case "slow":
		sec = newSection(e.name, name, fmt.Sprintf("3b. Ordered rows into a slow target (2 ms per Publish call): %d messages", cfg.slowRows))
		err = slowSection(ctx, e, cfg, sec)
	case "stall":
		sec = newSection(e.name, name, fmt.Sprintf("3c. Unordered rows past messages hung at the target: %d messages", cfg.stallRows))
		err = stallSection(ctx, e, cfg, sec)
	case "latency":
		sec = newSection(e.name, name, "4. Latency commit → publish (one message per transaction)")
		err = latencySection(ctx, e, cfg, sec)
	case "scaling":
		sec = newSection(e.name, name, fmt.Sprintf("5. Scaling: %d ordered messages (64 lanes, 1,000 keys), 1/2/4 forwarders", cfg.scaleRows))
		err = scalingSection(ctx, e, cfg, sec)
	case "memory":
		sec = newSection(e.name, name, fmt.Sprintf("6. Memory: draining a %d-row backlog (child process)", cfg.memoryRows))
		err = memorySection(ctx, e, cfg, sec)
	}
	sec.failure = err
	return sec
}

func (e *engine) version(ctx context.Context) string {
	var v string
	if err := e.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "version unknown: " + err.Error()
	}
	return v
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	return "?"
}
