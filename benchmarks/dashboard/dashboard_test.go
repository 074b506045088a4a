// Package dashboard measures the server time of the dashboard's pages (package
// dashboard of the library) over a 1,000,000-row backlog and 100,000 parked rows, on
// MariaDB and PostgreSQL:
//
//	cd benchmarks && go test -run '^$' -bench Dashboard -benchtime 5x ./dashboard/
//
// The tables (prefix dashbench_) are seeded on the first run (a few minutes) and kept
// for the next ones; OUTBOX_BENCH_DASHBOARD_RESEED=1 seeds them again. The handler is
// called directly (httptest.ResponseRecorder): the figure is the page's server time,
// its database reads and its rendering.
package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/dashboard"
	"github.com/relayer-go/watermill-outbox/internal/dashseed"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

const (
	backlogRows = 1_000_000
	parkedRows  = 100_000
	benchPrefix = "dashbench_"
	keys        = 10_000
)

// farFuture counts every pending row (see package dashboard).
var farFuture = time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC)

func BenchmarkDashboard(b *testing.B) {
	for _, service := range dashseed.Services {
		b.Run(service, func(b *testing.B) {
			store, _ := dashseed.Open(b, service, benchPrefix, true)
			ensureSeeded(b, service, store)
			cold, err := dashboard.New(store, dashboard.Config{AllowMutations: true, QueryTimeout: time.Minute, SnapshotMaxAge: -1}, nil)
			if err != nil {
				b.Fatal(err)
			}
			warm, err := dashboard.New(store, dashboard.Config{AllowMutations: true, QueryTimeout: time.Minute}, nil)
			if err != nil {
				b.Fatal(err)
			}
			// The overview and the lanes view read a shared snapshot of the backlog
			// figures: "cold" reads it for each request (SnapshotMaxAge -1), "warm" shows
			// the last one (at most a minute old) while a fresh one is read in the
			// background, as a dashboard someone watches does.
			for _, page := range []string{"/", "/api/overview", "/lanes"} {
				b.Run("cold"+page, func(b *testing.B) { benchPage(b, cold, page) })
			}
			benchPage(nil, warm, "/") // the first snapshot
			for _, page := range []string{"/", "/api/overview", "/lanes"} {
				b.Run("warm"+page, func(b *testing.B) { benchPage(b, warm, page) })
			}
			row := firstParked(b, store)
			for _, page := range []string{"/parked", "/parked?key=key-42", "/parked?topic=no-such-topic",
				"/row?id=" + row.String(), "/inbox", "/find?key=key-42", "/confirm?op=purge&error=no-such-error"} {
				b.Run(page, func(b *testing.B) { benchPage(b, cold, page) })
			}
		})
	}
}

// benchPage times GET page; with a nil b it serves it once.
func benchPage(b *testing.B, h http.Handler, page string) {
	get := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", page, nil))
		if rec.Code != 200 {
			panic(fmt.Sprintf("%s: %d\n%s", page, rec.Code, rec.Body.String()))
		}
	}
	if b == nil {
		get()
		return
	}
	for b.Loop() {
		get()
	}
}

func firstParked(b *testing.B, store outbox.Store) outbox.ID {
	recs, err := store.ListParked(context.Background(), outbox.ParkedQuery{Limit: 1})
	if err != nil || len(recs) == 0 {
		b.Fatalf("no parked row: %v", err)
	}
	return recs[0].ID
}

// ensureSeeded fills the tables unless they hold the expected rows already.
func ensureSeeded(b *testing.B, service string, store outbox.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pending, err := store.Count(ctx, farFuture)
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Stats(ctx, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if pending == backlogRows && st.Parked == parkedRows && os.Getenv("OUTBOX_BENCH_DASHBOARD_RESEED") == "" {
		return
	}
	sqlDB := store.DB()
	if err := dashseed.Drop(ctx, service, sqlDB, store.Options()); err != nil {
		b.Fatal(err)
	}
	if err := store.CreateSchema(ctx); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := seed(ctx, store); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: seeded %d pending and %d parked rows in %s", testenv.EnvVar(service), backlogRows, parkedRows, time.Since(start).Round(time.Second))
}

// seed writes backlogRows pending rows (half unordered, half over keys ordering keys)
// and parkedRows parked rows, all created over the last hour.
func seed(ctx context.Context, store outbox.Store) error {
	lanesN := store.Options().Lanes
	at := time.Now().UTC().Add(-time.Hour)
	batch := make([]outbox.Record, 0, 5000)
	for i := range backlogRows {
		key := ""
		if i%2 == 1 {
			key = fmt.Sprintf("key-%d", i%keys)
		}
		batch = append(batch, dashseed.Row("orders", key, []byte(`{"order":12345,"lines":[1,2,3]}`), map[string]string{"trace": "t"},
			at.Add(time.Duration(i)*time.Millisecond), lanesN))
		if len(batch) == cap(batch) {
			if err := dashseed.Insert(ctx, store, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	for i := 0; i < parkedRows; i += 5000 {
		for j := range 5000 {
			key := ""
			if j%4 == 0 {
				key = fmt.Sprintf("key-%d", (i+j)%keys)
			}
			batch = append(batch, dashseed.Row("payments", key, []byte("parked payload"), nil, at, lanesN))
		}
		if err := dashseed.Park(ctx, store, batch, "broker said no", 4); err != nil {
			return err
		}
		batch = batch[:0]
	}
	return nil
}
