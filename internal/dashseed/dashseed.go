// Package dashseed opens stores on the test servers and seeds the rows the dashboard's
// tests, browser tests and benchmark look at: ordinary backlogs, parked rows and the
// hostile rows of issue 38 (markup in every text, invalid UTF-8, 10 MB payloads,
// 10,000 metadata entries). It is test support: nothing of the library imports it.
package dashseed

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// Services are the dialects the dashboard is tested on: MariaDB (mysql) and PostgreSQL.
var Services = []string{testenv.MySQL, testenv.Postgres}

// Open opens service's test database, builds a store over fresh tables (prefix from
// testenv.Prefix unless prefix is set) and drops them when the test ends (unless keep).
func Open(t testing.TB, service, prefix string, keep bool) (outbox.Store, *sql.DB) {
	t.Helper()
	dsn := testenv.DSN(t, service)
	db, store, err := OpenDSN(service, dsn, prefixOr(t, prefix))
	if err != nil {
		testenv.Unavailable(t, service, err)
	}
	t.Cleanup(func() { db.Close() })
	if !keep {
		testenv.Cleanup(t, "drop dashboard test tables", func(ctx context.Context) error { return Drop(ctx, service, db, store.Options()) })
	}
	return store, db
}

func prefixOr(t testing.TB, prefix string) string {
	if prefix != "" {
		return prefix
	}
	return testenv.Prefix(t)
}

// OpenDSN opens dsn and a store over prefix's tables, creating them.
func OpenDSN(service, dsn, prefix string) (*sql.DB, outbox.Store, error) {
	opts := outbox.Options{TablePrefix: prefix}
	var db *sql.DB
	var store outbox.Store
	var err error
	switch service {
	case testenv.Postgres:
		if db, err = postgres.OpenDB(dsn); err == nil {
			store, err = postgres.New(db, opts)
		}
	default:
		if db, err = mysql.OpenDB(dsn); err == nil {
			store, err = mysql.New(db, opts)
		}
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.CreateSchema(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, store, nil
}

// Drop drops the tables of opts.
func Drop(ctx context.Context, service string, db *sql.DB, opts outbox.Options) error {
	var errs []error
	for _, table := range opts.TableNames() {
		q := mysql.QualifiedTable(opts, table)
		if service == testenv.Postgres {
			q = postgres.QualifiedTable(opts, table)
		}
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+q); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Row builds a record for topic; a non-empty key puts it in its lane (of lanesCount).
func Row(topic, key string, body []byte, md map[string]string, at time.Time, lanesCount int) outbox.Record {
	hs := make([]headercodec.Header, 0, len(md))
	for k, v := range md {
		hs = append(hs, headercodec.Header{Name: k, Value: []byte(v)})
	}
	r := outbox.Record{ID: outbox.NewID(), MessageUUID: fmt.Sprintf("uuid-%s", outbox.NewID()), Lane: outbox.Unordered,
		OrderingKey: key, Destination: topic, Headers: headercodec.Encode(nil, hs), Body: body, CreatedAt: at, DeliverAt: at}
	if key != "" {
		r.Lane = lanes.Of(key, lanesCount)
	}
	return r
}

// Insert writes records in transactions of at most 5,000 rows.
func Insert(ctx context.Context, store outbox.Store, recs []outbox.Record) error {
	for len(recs) > 0 {
		n := min(len(recs), 5000)
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := store.Insert(ctx, tx, recs[:n]); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// Park inserts records and parks each with reason (workers at once).
func Park(ctx context.Context, store outbox.Store, recs []outbox.Record, reason string, workers int) error {
	if err := Insert(ctx, store, recs); err != nil {
		return err
	}
	errs := make(chan error, workers)
	next := make(chan outbox.ID)
	for range workers {
		go func() {
			var first error
			for id := range next {
				if first == nil {
					if ok, err := store.Park(ctx, id, reason, time.Now()); err != nil {
						first = err
					} else if !ok {
						first = fmt.Errorf("row %s not parked", id)
					}
				}
			}
			errs <- first
		}()
	}
	for i := range recs {
		next <- recs[i].ID
	}
	close(next)
	var all []error
	for range workers {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// Hostile markup, as issue 38 names it.
const (
	Script = `<script>window.__pwned=1;alert("x")</script>`
	Img    = `"><img src=x onerror="window.__pwned=2;alert(1)">`
)

// HostileText is a text carrying both markups (valid UTF-8: the text columns store only
// that).
func HostileText(tag string) string { return tag + " " + Script + " " + Img + " '\u202e" }

// HostileRows returns the hostile rows: every text field carries markup; payloads hold
// markup with invalid UTF-8, a 10 MB payload and a JSON payload whose strings carry
// markup; metadata holds markup names and values, invalid UTF-8 values and, in one row,
// 10,000 entries.
func HostileRows(at time.Time, lanesCount int) []outbox.Record {
	md := map[string]string{Script: Img, "bad-utf8": "\xff\xfe" + Script, "x-img": Img}
	rows := []outbox.Record{
		Row(HostileText("topic"), HostileText("key"), []byte(Script+"\xff\xfe\xfd"+Img), md, at, lanesCount),
		Row(HostileText("big"), "", []byte(strings.Repeat(Script, 10<<20/len(Script)+1)), md, at, lanesCount),
		Row(HostileText("json"), "", []byte(`{"html":"`+strings.ReplaceAll(Img, `"`, `\"`)+`","n":[1,2,3]}`), md, at, lanesCount),
	}
	many := make(map[string]string, 10000)
	for i := range 10000 {
		many[fmt.Sprintf("%s-%05d", Script, i)] = Img
	}
	rows = append(rows, Row(HostileText("meta"), "", []byte("ok"), many, at, lanesCount))
	for i := range rows {
		rows[i].MessageType = HostileText("type")
		rows[i].Transport = HostileText("transport")
		rows[i].TenantID = HostileText("tenant")
	}
	return rows
}
