// Command findindex measures what an index on the rows table's message_uuid (the one
// `outboxctl find` by UUID reads) costs a transaction of 1,000 rows written by the
// store's own Insert: two tables of one dialect, the store's schema with and without
// the index, take turns transaction by transaction (the order alternating), each with
// one business row, as outboxbench's publish does. It prints each one's median time and
// the median of the per-round rate with the index against without (without / with:
// 1.0 = free, 0.9 = 10 % slower).
//
//	go run ./cmd/findindex -db mysql -dsn 'root@tcp(127.0.0.1:3306)/test' -rounds 60
//	go run ./cmd/findindex -db postgres -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// It creates and drops tables named fi_*.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

var (
	body    = []byte(`{"order_id":"0123456789","customer":"c-42","amount":1999,"currency":"EUR","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	headers = []byte("\x01\x00\x00\x00\x01\x00\x00\x00\x04\x00\x00\x00type\x0d\x00\x00\x00order.created")
)

type side struct {
	name  string
	store outbox.Store
	table string
}

func main() {
	dbName := flag.String("db", "mysql", "mysql or postgres")
	dsn := flag.String("dsn", "root@tcp(127.0.0.1:3306)/test", "DSN")
	rounds := flag.Int("rounds", 40, "transactions per side (after 3 untimed rounds)")
	n := flag.Int("n", 1000, "rows per transaction")
	flag.Parse()
	ctx := context.Background()
	driver, qualify := "mysql", mysql.QualifiedTable
	if *dbName == "postgres" {
		driver, qualify = "pgx", postgres.QualifiedTable
	}
	db, err := sql.Open(driver, *dsn)
	must(err)
	db.SetMaxOpenConns(4)
	exec := func(q string) { _, err := db.ExecContext(ctx, q); must(err) }
	exec("DROP TABLE IF EXISTS fi_orders")
	exec("CREATE TABLE fi_orders (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL)")
	defer exec("DROP TABLE IF EXISTS fi_orders")
	var sides []side
	for _, name := range []string{"without", "with"} {
		opts := outbox.Options{TablePrefix: "fi_" + name + "_"}
		for _, t := range opts.TableNames() {
			exec("DROP TABLE IF EXISTS " + qualify(opts, t))
		}
		var st outbox.Store
		if driver == "pgx" {
			st, err = postgres.New(db, opts)
		} else {
			st, err = mysql.New(db, opts)
		}
		must(err)
		must(st.CreateSchema(ctx))
		table := qualify(opts, opts.OutboxTable())
		if name == "with" {
			exec("CREATE INDEX fi_ix_uuid ON " + table + " (message_uuid)")
		}
		sides = append(sides, side{name: name, store: st, table: table})
		defer func() {
			for _, t := range opts.TableNames() {
				exec("DROP TABLE IF EXISTS " + qualify(opts, t))
			}
		}()
	}
	var order int64
	times := make([][]float64, len(sides))
	var ratios []float64
	for round := -3; round < *rounds; round++ {
		d := make([]time.Duration, len(sides))
		for k := range sides {
			i := (k + round + 3) % len(sides)
			t0 := time.Now()
			order++
			must(write(ctx, db, sides[i].store, *n, order))
			d[i] = time.Since(t0)
		}
		if round < 0 {
			continue
		}
		for i := range sides {
			times[i] = append(times[i], float64(d[i].Microseconds()))
		}
		ratios = append(ratios, float64(d[0])/float64(d[1]))
		if round%10 == 9 { // keep the tables small
			for _, s := range sides {
				exec("DELETE FROM " + s.table)
			}
		}
	}
	for i, s := range sides {
		fmt.Printf("%s %-8s index (message_uuid): %8.0f µs per %d-row transaction\n", *dbName, s.name, med(times[i]), *n)
	}
	fmt.Printf("%s rate with/without (median of %d paired rounds): %.3f\n", *dbName, len(ratios), med(ratios))
}

// write inserts one business row and n outbox rows (Insert) in one transaction.
func write(ctx context.Context, db *sql.DB, st outbox.Store, n int, order int64) error {
	now := time.Now().UTC()
	recs := make([]outbox.Record, n)
	for i := range recs {
		recs[i] = outbox.Record{ID: outbox.NewID(), MessageUUID: watermill.NewUUID(), Lane: outbox.Unordered, Destination: "orders", Headers: headers, Body: body, CreatedAt: now}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ph := "?, ?"
	if _, ok := st.(*postgres.Store); ok {
		ph = "$1, $2"
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO fi_orders (id, customer) VALUES ("+ph+")", order, "c-42"); err != nil {
		return err
	}
	if err := st.Insert(ctx, tx, recs); err != nil {
		return err
	}
	return tx.Commit()
}

func med(x []float64) float64 { s := slices.Clone(x); slices.Sort(s); return s[len(s)/2] }

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
