package publisher_test

import (
	"context"
	"database/sql"
	"io"
	"os"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// TestExamples runs the Example functions against MariaDB (they read
// OUTBOX_TEST_MYSQL_DSN) and checks what they print. It is not parallel: it swaps
// os.Stdout, and parallel tests only start once the sequential ones are done.
func TestExamples(t *testing.T) {
	dsn := testenv.DSN(t, testenv.MySQL)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, ex := range []struct {
		name   string
		prefix string
		run    func()
		want   string
	}{
		{"beginPublishCommit", "example_begin_", Example_beginPublishCommit, exampleBeginPublishCommitOutput},
		{"flushExistingTx", "example_flush_", Example_flushExistingTx, exampleFlushExistingTxOutput},
		{"middleware", "example_mw_", Example_middleware, exampleMiddlewareOutput},
	} {
		t.Run(ex.name, func(t *testing.T) {
			drop := func() {
				opts := outbox.Options{TablePrefix: ex.prefix}
				testenv.Bounded(t, "drop the example's tables", testenv.CleanupTimeout, func(ctx context.Context) error {
					for _, tb := range append(opts.TableNames(), ex.prefix+"orders") {
						if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb); err != nil {
							return err
						}
					}
					return nil
				})
			}
			drop()
			defer drop()
			if got := captureStdout(t, ex.run); got != ex.want {
				t.Fatalf("Example_%s printed\n%s\nwant\n%s", ex.name, got, ex.want)
			}
		})
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	defer func() { os.Stdout = orig }()
	f()
	os.Stdout = orig
	w.Close()
	return <-out
}
