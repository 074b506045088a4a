package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/relayer-go/watermill-outbox/dashboard"
)

// listenDefault keeps the standalone dashboard on loopback unless told otherwise.
const listenDefault = "127.0.0.1:8080"

func init() {
	commands["serve"] = command{needsDB: true, server: true, flags: serveFlags, run: serve}
}

// serveOpts are serve's own flags.
type serveOpts struct {
	listen  string
	mutate  bool
	title   string
	refresh time.Duration
}

func serveFlags(fs *flag.FlagSet, o *opts) {
	so := &o.serve
	fs.StringVar(&so.listen, "listen", listenDefault, "address to serve the dashboard on (loopback by default)")
	fs.BoolVar(&so.mutate, "allow-mutations", false, "offer requeue and purge of parked rows (each is logged to stderr)")
	fs.StringVar(&so.title, "title", "", "title of the pages (default: the outbox table's name)")
	fs.DurationVar(&so.refresh, "refresh", dashboard.RefreshIntervalDefault, "how often the overview refreshes")
}

// serve runs the dashboard until ctx ends.
func serve(ctx context.Context, o *opts, w io.Writer) error {
	so := &o.serve
	startCtx, cancel := context.WithTimeout(ctx, o.timeout)
	t, err := connect(startCtx, o, true)
	cancel()
	if err != nil {
		return err
	}
	defer t.Close()
	title := so.title
	if title == "" {
		title = "outbox " + qualified(o, o.options().OutboxTable())
	}
	logger := watermill.NewStdLoggerWithOut(o.stderr, false, false)
	h, err := dashboard.New(t.store, dashboard.Config{AllowMutations: so.mutate, Title: title,
		RefreshInterval: so.refresh, QueryTimeout: o.timeout}, logger)
	if err != nil {
		return usageError{err.Error()}
	}
	ln, err := net.Listen("tcp", so.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if !loopback(ln.Addr()) {
		fmt.Fprintf(o.stderr, "outboxctl serve: WARNING: %s is not a loopback address and the dashboard has no authentication of its own: "+
			"everyone who reaches it sees the outbox%s\n", ln.Addr(), map[bool]string{true: " and can requeue and purge", false: ""}[so.mutate])
	}
	mode := "read-only"
	if so.mutate {
		mode = "mutations allowed"
	}
	fmt.Fprintf(w, "outboxctl serve: dashboard of %s on http://%s/ (%s); Ctrl-C stops it\n", o.where(), ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: o.timeout + time.Minute, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	return nil
}

func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
