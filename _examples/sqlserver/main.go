// Command sqlserver runs the outbox on SQL Server (docker-compose.yml's `sqlserver`
// service: `docker compose up -d --wait sqlserver`).
//
// It deploys the schema (the same T-SQL that sqlserver.CreateScript returns for a
// migration tool), writes an order row and its event in one transaction, rolls another
// one back, and forwards the committed event to Watermill's in-memory Pub/Sub.
//
//	go run ./_examples/sqlserver -dsn 'sqlserver://sa:Outbox_Test_2026!@127.0.0.1:1433?database=test'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/microsoft/go-mssqldb" // driver "sqlserver"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

func main() {
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "sqlserver://sa:Outbox_Test_2026!@127.0.0.1:1433?database=test"), "go-mssqldb DSN (env OUTBOX_DSN)")
	schema := flag.String("schema", "", "schema of the outbox tables (default dbo)")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, *schema); err != nil {
		fmt.Fprintln(os.Stderr, "sqlserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, schema string) error {
	logger := watermill.NopLogger{}
	db, err := sql.Open("sqlserver", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// A forwarder runs one worker per lane it holds (64 by default): unbounded, they would
	// open a connection each after every burst, and database/sql keeps only two idle.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	opts := outbox.Options{Schema: schema, TablePrefix: "example_"} // a named schema is created when missing
	store, err := sqlserver.New(db, opts)
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil { // idempotent, under an application lock
		return err
	}
	if _, err := db.ExecContext(ctx, `IF OBJECT_ID(N'dbo.example_orders', N'U') IS NULL
		CREATE TABLE dbo.example_orders (id nvarchar(64) NOT NULL PRIMARY KEY, customer nvarchar(64) NOT NULL)`); err != nil {
		return err
	}

	// BlockPublishUntilSubscriberAck: GoChannel delivers each message of a Publish
	// call in a goroutine of its own unless it blocks, which would reorder a key's
	// messages (a real broker keeps the order of one Publish call).
	events := gochannel.NewGoChannel(gochannel.Config{Persistent: true, BlockPublishUntilSubscriberAck: true}, logger)
	defer events.Close()
	received, err := events.Subscribe(ctx, "orders.placed")
	if err != nil {
		return err
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": events}, forwarder.Config{}, logger)
	if err != nil {
		return err
	}
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	if err != nil {
		return err
	}
	fwdCtx, stopFwd := context.WithCancel(ctx)
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(fwdCtx) }()
	defer func() { stopFwd(); <-fwdDone }()

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	place := func(id string, commit bool) error {
		tx, err := ob.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO dbo.example_orders (id, customer) VALUES (@p1, @p2)", id, "alice"); err != nil {
			return err
		}
		msg := message.NewMessage(watermill.NewUUID(), []byte(id))
		msg.Metadata.Set(publisher.MetadataOrderingKey, "alice")
		msg.Metadata.Set("order_id", id)
		if err := tx.Publish("orders.placed", msg); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit(ctx)
	}
	ids := []string{run + "-1", run + "-2", run + "-3"}
	for i, id := range ids {
		if err := place(id, i != 1); err != nil {
			return fmt.Errorf("order %s: %w", id, err)
		}
	}
	var got []string
	for len(got) < 2 {
		select {
		case m := <-received:
			m.Ack()
			if id := m.Metadata.Get("order_id"); len(id) > len(run) && id[:len(run)] == run {
				got = append(got, id)
				fmt.Println("received OrderPlaced", id)
			}
		case <-ctx.Done():
			return fmt.Errorf("timed out; received %v", got)
		}
	}
	if got[0] != ids[0] || got[1] != ids[2] {
		return fmt.Errorf("received %v, want [%s %s]", got, ids[0], ids[2])
	}
	fmt.Println("OK: sqlserver: committed orders' events delivered in order, the rolled-back one never sent")
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
