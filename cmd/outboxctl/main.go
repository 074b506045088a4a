package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/dsn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `outboxctl: operate watermill-outbox tables

usage:
  outboxctl schema print   [-dialect D] [-schema S] [-prefix P] [-find-index]
  outboxctl schema apply   -dsn DSN [-dialect D] [-schema S] [-prefix P]
  outboxctl schema migrate [-dialect D] [-schema S] [-prefix P]
  outboxctl stats          -dsn DSN [-prefix P] [--json]
  outboxctl parked list    -dsn DSN [-key K] [-after ID] [-limit N] [--json]
  outboxctl parked requeue -dsn DSN (-id ID[,ID...] | -key K | -all)
  outboxctl parked purge   -dsn DSN (-id ID[,ID...] | -key K | -all) --yes
  outboxctl leases         -dsn DSN [--json]
  outboxctl serve          -dsn DSN [-listen 127.0.0.1:8080] [-allow-mutations] [-title T]
  outboxctl find           -dsn DSN (-uuid U | -key K | -topic T) [-since T] [-until T] [-limit N] [--json]

common flags (after the command):
  -dialect  mysql | postgres | sqlserver (default: guessed from -dsn; mysql for schema print)
  -dsn      data source name (default: $OUTBOX_DSN); its password is never printed
  -schema   schema (database) of the tables; default: the connection's
  -prefix   table prefix, as in outbox.Options.TablePrefix
  -lanes    lane count of the table (default 64); must match writers and forwarders
  -timeout  bound on the whole command (default 30s; serve: on each request's queries)

exit status: 0 ok, 1 failure, 2 usage error
`

// usageError is a wrong command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// run is the whole command; tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "outboxctl: %s\n(run `outboxctl help` for usage)\n", scrubArgs(ue.msg, args))
		return 2
	default:
		fmt.Fprintf(stderr, "outboxctl: %s\n", scrubArgs(err.Error(), args))
		return 1
	}
}

// scrubArgs removes from msg the password of $OUTBOX_DSN and of every argument that may
// be a DSN (the -dsn value, or a DSN given by mistake as an argument): the last guard of
// every error path.
func scrubArgs(msg string, args []string) string {
	msg = dsn.Scrub(msg, os.Getenv("OUTBOX_DSN"))
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			a = v // -dsn=VALUE
		}
		msg = dsn.Scrub(msg, a)
	}
	return msg
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "schema", "parked":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return usagef("%s needs a subcommand (%s)", cmd, subcommands[cmd])
		}
		cmd, rest = cmd+" "+rest[0], rest[1:]
	}
	c, ok := commands[cmd]
	if !ok {
		return usagef("unknown command %q", cmd)
	}
	fs := flag.NewFlagSet("outboxctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &opts{stderr: stderr}
	o.register(fs)
	if c.flags != nil {
		c.flags(fs, o)
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", cmd, dsn.Redact(fs.Arg(0)))
	}
	if err := o.finish(c.needsDB); err != nil {
		return err
	}
	if !c.server {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	return c.run(ctx, o, stdout)
}

var subcommands = map[string]string{"schema": "print or apply", "parked": "list, requeue or purge"}

type command struct {
	needsDB bool
	server  bool // runs until interrupted; -timeout bounds its requests, not the command
	flags   func(*flag.FlagSet, *opts)
	run     func(context.Context, *opts, io.Writer) error
}

var commands = map[string]command{
	"schema print":   {needsDB: false, flags: schemaPrintFlags, run: schemaPrint},
	"schema apply":   {needsDB: true, run: schemaApply},
	"schema migrate": {needsDB: false, run: schemaMigrate},
	"stats":          {needsDB: true, run: stats},
	"parked list":    {needsDB: true, flags: parkedListFlags, run: parkedList},
	"parked requeue": {needsDB: true, flags: parkedFilterFlags, run: parkedRequeue},
	"parked purge":   {needsDB: true, flags: parkedPurgeFlags, run: parkedPurge},
	"leases":         {needsDB: true, run: leases},
	"find":           {needsDB: true, flags: findFlags, run: find},
}

// opts are the flags every command shares, plus the per-command ones.
type opts struct {
	dialect string
	dsn     string
	schema  string
	prefix  string
	lanes   int
	json    bool
	timeout time.Duration

	// parked
	key    string
	hasKey bool
	ids    string
	all    bool
	yes    bool
	after  string
	limit  int

	// find
	uuid, topic, since, until string
	findIndex                 bool

	now func() time.Time

	serve  serveOpts // serve's own flags (serve.go)
	stderr io.Writer
}

func (o *opts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.dialect, "dialect", os.Getenv("OUTBOX_DIALECT"), "mysql, postgres or sqlserver (default: guessed from the DSN)")
	// Never a flag default: the flag package prints defaults on -h and on flag errors.
	fs.StringVar(&o.dsn, "dsn", "", "data source name (default $OUTBOX_DSN; its password is never printed)")
	fs.StringVar(&o.schema, "schema", "", "schema (database) of the tables")
	fs.StringVar(&o.prefix, "prefix", "", "table prefix")
	fs.IntVar(&o.lanes, "lanes", outbox.LanesDefault, "lane count of the table")
	fs.BoolVar(&o.json, "json", false, "print JSON (for scripts)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound on the whole command")
}

func (o *opts) finish(needsDB bool) error {
	if o.dsn == "" {
		o.dsn = os.Getenv("OUTBOX_DSN")
	}
	if needsDB && o.dsn == "" {
		return usagef("-dsn (or OUTBOX_DSN) is required")
	}
	if o.dialect == "" {
		o.dialect = guessDialect(o.dsn)
	}
	switch o.dialect {
	case "mysql", "postgres", "sqlserver":
	case "mariadb":
		o.dialect = "mysql"
	case "postgresql", "pgx":
		o.dialect = "postgres"
	case "mssql":
		o.dialect = "sqlserver"
	default:
		return usagef("-dialect %q: want mysql, postgres or sqlserver", o.dialect)
	}
	if o.timeout <= 0 {
		return usagef("-timeout must be positive")
	}
	if o.now == nil {
		o.now = time.Now
	}
	return nil
}

// guessDialect reads the DSN's form: URLs by scheme, pgx keyword DSNs by their keys,
// anything else is go-sql-driver/mysql's form.
func guessDialect(dsn string) string {
	lower := strings.ToLower(strings.TrimSpace(dsn))
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return "postgres"
	case strings.HasPrefix(lower, "sqlserver://"):
		return "sqlserver"
	case strings.Contains(lower, ";") && (strings.Contains(lower, "server=") || strings.Contains(lower, "data source=")):
		return "sqlserver"
	case strings.HasPrefix(lower, "host=") || strings.Contains(lower, " host=") || strings.Contains(lower, "dbname="):
		return "postgres"
	}
	return "mysql"
}

func (o *opts) options() outbox.Options {
	return outbox.Options{Schema: o.schema, TablePrefix: o.prefix, Lanes: o.lanes}
}
