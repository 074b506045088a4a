package forwarder

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// errorLog records the messages logged at error level.
type errorLog struct {
	watermill.NopLogger
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Error(msg string, _ error, _ watermill.LogFields) {
	l.mu.Lock()
	l.msgs = append(l.msgs, msg)
	l.mu.Unlock()
}

func (l *errorLog) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// count returns how many logged messages contain s.
func (l *errorLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// TestAckWithoutPublishIsAFailure: a router-wide PoisonQueue on the forwarder's router
// while the broker is down (a target that fails every publish) acks every message the
// forwarder emits. No row may be deleted: each is failed with backoff and parked after
// MaxAttempts, as without the middleware, in every sending mode, and the forwarder logs
// once what the middleware did. A middleware that acks without calling the handler is
// treated the same way.
func TestAckWithoutPublishIsAFailure(t *testing.T) {
	modes := []struct {
		name string
		cfg  func(*Config)
	}{
		{"locked batches", func(*Config) {}},
		{"token claims", func(c *Config) { c.TokenClaims = true }},
	}
	middlewares := []struct {
		name, logged, reason string
		mw                   func(t *testing.T) message.HandlerMiddleware
	}{
		{"PoisonQueue", "acked a message whose publish failed", "broker down", func(t *testing.T) message.HandlerMiddleware {
			pq, err := middleware.PoisonQueue(gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), "poison")
			if err != nil {
				t.Fatal(err)
			}
			return pq
		}},
		{"skipping the handler", "without the forwarder's handler publishing it", overriddenReason, func(*testing.T) message.HandlerMiddleware {
			return func(message.HandlerFunc) message.HandlerFunc {
				return func(*message.Message) ([]*message.Message, error) { return nil, nil }
			}
		}},
	}
	for _, mode := range modes {
		for _, mw := range middlewares {
			t.Run(mode.name+"/"+mw.name, func(t *testing.T) {
				forEachDialect(t, func(t *testing.T, tb *table) {
					target := newRecorder()
					target.setFail(func(string, *message.Message) error { return errors.New("broker down") })
					cfg := fastConfig()
					cfg.MaxAttempts = 3
					mode.cfg(&cfg)
					log := &errorLog{}
					f, err := New(tb.store, Targets{"": target}, cfg, log)
					if err != nil {
						t.Fatal(err)
					}
					router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
					if err != nil {
						t.Fatal(err)
					}
					router.AddMiddleware(mw.mw(t))
					if _, err := f.AddToRouter(router); err != nil {
						t.Fatal(err)
					}
					tb.insert(t, tb.row("t", "", "u1"), tb.row("t", "", "u2"),
						tb.row("t", "key-a", "a1"), tb.row("t", "key-b", "b1"))
					runRouter(t, router, f)

					waitFor(t, 20*time.Second, "4 rows parked", func() bool { return len(tb.parked(t)) == 4 })
					if n := tb.rows(t); n != 4 {
						t.Fatalf("%d rows in the table; want 4 (a row whose message was never published was deleted)", n)
					}
					for _, r := range tb.parked(t) {
						if r.Attempts != cfg.MaxAttempts || !strings.Contains(r.LastError, mw.reason) {
							t.Errorf("parked row %s: attempts %d, last error %q; want %d attempts and %q",
								r.Body, r.Attempts, r.LastError, cfg.MaxAttempts, mw.reason)
						}
					}
					if n := log.count(mw.logged); n != 1 {
						t.Errorf("logged %q %d times; want once", mw.logged, n)
					}
				})
			})
		}
	}
}

// runRouter runs router until the test ends.
func runRouter(t *testing.T, router *message.Router, f *Forwarder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-errc:
		cancel()
		t.Fatalf("router: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		<-errc
		_ = router.Close()
		_ = f.Close()
	})
}
