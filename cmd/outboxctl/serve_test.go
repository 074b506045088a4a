package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/watermill-outbox/internal/dashseed"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// lockedBuffer is a bytes sink the server goroutine writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var servingOn = regexp.MustCompile(`on (http://[^/ ]+/)`)

// startServe runs `outboxctl serve` with args until the test ends; it returns the URL it
// printed and its stderr.
func startServe(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, append([]string{"serve"}, args...), &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("serve exited %d: %s", c, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not stop within 10 s of its context's end")
		}
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := servingOn.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], &stderr
		}
		select {
		case c := <-code:
			code <- c
			t.Fatalf("serve exited %d:\n%s%s", c, stdout.String(), stderr.String())
		default:
		}
	}
	t.Fatalf("serve printed no address:\n%s%s", stdout.String(), stderr.String())
	return "", nil
}

func TestServe(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			dsn := testenv.DSN(t, d.service)
			if u, err := url.Parse(dsn); err == nil && u.Scheme == "postgres" && u.User != nil {
				// The local server trusts TCP logins: a password in the DSN is accepted and
				// must appear in no page.
				if _, set := u.User.Password(); !set {
					u.User = url.UserPassword(u.User.Username(), "S3cretPw")
					dsn = u.String()
				}
			}
			store, _ := dashseed.Open(t, d.service, "", false)
			prefix := store.Options().TablePrefix
			base, _ := startServe(t, "-dialect", d.name, "-dsn", dsn, "-prefix", prefix, "-listen", "127.0.0.1:0")
			if !strings.HasPrefix(base, "http://127.0.0.1:") {
				t.Errorf("serve listens on %s, want loopback", base)
			}
			resp, err := http.Get(base)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "Overview") || !strings.Contains(string(body), "read-only") {
				t.Errorf("GET /: %d\n%s", resp.StatusCode, body)
			}
			for _, page := range []string{"", "lanes", "parked", "inbox", "find?key=k", "row?id=01ARZ3NDEKTSV4RRFFQ69G5FAV", "nope"} {
				resp, err := http.Get(base + page)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, secret := range []string{dsn, "S3cretPw", "127.0.0.1:3306", ":5432", "root@"} {
					if strings.Contains(string(body), secret) {
						t.Errorf("page %q holds %q:\n%s", page, secret, body)
					}
				}
			}
			resp, err = http.Post(base+"action", "application/x-www-form-urlencoded", strings.NewReader("op=purge&id=x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST action on a read-only serve: %d, want 403", resp.StatusCode)
			}
		})
	}
}

func TestServeWarnsOffLoopback(t *testing.T) {
	dsn := testenv.DSN(t, testenv.Postgres)
	store, _ := dashseed.Open(t, testenv.Postgres, "", false)
	_, stderr := startServe(t, "-dsn", dsn, "-prefix", store.Options().TablePrefix, "-listen", "0.0.0.0:0", "-allow-mutations")
	if !strings.Contains(stderr.String(), "not a loopback address") || !strings.Contains(stderr.String(), "requeue and purge") {
		t.Errorf("no warning for a non-loopback -listen:\n%s", stderr.String())
	}
}
