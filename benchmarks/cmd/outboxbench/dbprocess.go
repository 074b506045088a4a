package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// Each database's sections run in a process of their own: this binary re-executed with
// childRoleEnv=roleDatabase and the harness's arguments, narrowed to one -db, in
// dbArgsEnv. What one database's sections leave in a process (the Kafka section's
// in-process broker and clients leave hundreds of MiB of Go heap to collect) cannot
// weigh on the next database's figures, as running the databases one after the other
// by hand would not either.
const (
	roleDatabase = "database"
	dbArgsEnv    = "OUTBOXBENCH_DB_ARGS"
)

// inDatabaseProcess reports whether this process runs one database's sections for a
// parent harness (which prints the run's header and total itself).
func inDatabaseProcess() bool { return os.Getenv(childRoleEnv) == roleDatabase }

// runDatabaseProcess is the roleDatabase child: the harness over the arguments the
// parent passed; it returns the exit code.
func runDatabaseProcess() int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(dbArgsEnv)), &args); err != nil {
		fmt.Fprintf(os.Stderr, "outboxbench: %s: %v\n", dbArgsEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return run(ctx, args, os.Stdout, os.Stderr)
}

// runInProcess runs db's sections in a child process over args (the harness's own,
// which parsed) with -db narrowed to db and, when profile is set, the CPU profile
// written to profile.<db>. The child prints to stdout and stderr as the harness does;
// it reports whether the child failed (a section failed, or the child could not run).
func runInProcess(ctx context.Context, db string, args []string, profile string, stdout, stderr io.Writer) bool {
	err := databaseCommand(ctx, db, args, profile, stdout, stderr)
	if _, exited := err.(*exec.ExitError); err != nil && !exited { // else the child printed why
		fmt.Fprintf(stdout, "\n## %s\n\nFAILED: %v\n", db, err)
	}
	return err != nil
}

// databaseCommand runs the roleDatabase child of runInProcess until it exits.
func databaseCommand(ctx context.Context, db string, args []string, profile string, stdout, stderr io.Writer) error {
	args = append(append([]string(nil), args...), "-db", db) // the last -db wins
	if profile != "" {
		args = append(args, "-cpuprofile", profile+"."+db)
	}
	encoded, err := json.Marshal(args)
	if err != nil {
		return err
	}
	cmd, err := selfCommand(ctx, roleDatabase, dbArgsEnv+"="+string(encoded))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Interrupted, the child stops its sections and drops its tables itself.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = time.Minute
	return cmd.Run()
}
