// Command existing-tx shows the outbox writing into a transaction the application
// already owns: a plain *sql.Tx here, an ORM's transaction in real code (see below).
//
// The application begins the transaction and does its own writes;
// publisher.Outbox.WithAttached attaches the outbox to it, runs the application's
// function (which publishes: buffered) and, when it returns nil, flushes the messages
// into the application's transaction; the application commits as it always does.
// NotifyCommitted then wakes the local forwarder and reports any message published
// after the flush (outbox.ErrNotFlushed), which would otherwise be lost silently.
//
// sqlx: *sqlx.Tx embeds *sql.Tx, so attach that:
//
//	stx, _ := dbx.BeginTxx(ctx, nil)
//	defer stx.Rollback()
//	otx, err := ob.WithAttached(ctx, stx.Tx, func(ctx context.Context, tx *publisher.Tx) error {
//		if _, err := stx.ExecContext(ctx, "INSERT ..."); err != nil {
//			return err
//		}
//		return tx.Publish("accounts.opened", msg)
//	})
//	if err == nil {
//		err = stx.Commit()
//	}
//	if err == nil {
//		err = otx.NotifyCommitted()
//	}
//
// GORM: inside db.Transaction the *sql.Tx is the statement's connection pool:
//
//	var otx *publisher.Tx
//	err := gdb.WithContext(ctx).Transaction(func(g *gorm.DB) error {
//		var err error
//		otx, err = ob.WithAttached(ctx, g.Statement.ConnPool.(*sql.Tx), func(ctx context.Context, tx *publisher.Tx) error {
//			if err := g.Create(&account).Error; err != nil {
//				return err
//			}
//			return tx.Publish("accounts.opened", msg)
//		})
//		return err // an error makes GORM roll back
//	})
//	if err == nil {
//		err = otx.NotifyCommitted()
//	}
//
// Run it against the local MariaDB (make services) or any MySQL:
//
//	go run ./_examples/existing-tx -dsn 'root@tcp(127.0.0.1:3306)/test'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/publisher"
)

func main() {
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL/MariaDB DSN (env OUTBOX_DSN)")
	prefix := flag.String("prefix", "existingtx_", "table prefix (letters, digits, underscores)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "existing-tx:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, prefix string) error {
	logger := watermill.NopLogger{}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// A forwarder runs one worker per lane it holds (64 by default): unbounded, they would
	// open a connection each after every burst, and database/sql keeps only two idle.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	store, err := mysql.New(db, outbox.Options{TablePrefix: prefix})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}
	accounts := "`" + prefix + "accounts`" // prefix is the example's own flag
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+accounts+
		" (id VARCHAR(64) PRIMARY KEY, owner VARCHAR(64) NOT NULL)"); err != nil {
		return err
	}

	// The target broker: Watermill's in-memory Pub/Sub keeps the example self-contained.
	// BlockPublishUntilSubscriberAck: GoChannel delivers each message of a Publish
	// call in a goroutine of its own unless it blocks, which would reorder a key's
	// messages (a real broker keeps the order of one Publish call).
	events := gochannel.NewGoChannel(gochannel.Config{Persistent: true, BlockPublishUntilSubscriberAck: true}, logger)
	defer events.Close()
	received, err := events.Subscribe(ctx, "accounts.opened")
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
	go func() { fwdDone <- fwd.Run(fwdCtx) }() // the forwarder on its own (no router)
	defer func() { stopFwd(); <-fwdDone }()

	run := fmt.Sprintf("%d", time.Now().UnixNano())
	open := func(id string, commit bool) error {
		// The application's transaction, begun and completed by the application.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // no-op after Commit
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+accounts+" (id, owner) VALUES (?, ?)", id, "ada"); err != nil {
			return err
		}
		otx, err := ob.WithAttached(ctx, tx, func(ctx context.Context, otx *publisher.Tx) error {
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{"account":"`+id+`"}`))
			msg.Metadata.Set(publisher.MetadataOrderingKey, "owner-ada") // one lane: publish order
			msg.Metadata.Set("account", id)
			return otx.Publish("accounts.opened", msg) // flushed into the application's tx on return
		})
		if err != nil {
			return err
		}
		if !commit {
			fmt.Printf("rolled back account %s: its message is discarded with the transaction\n", id)
			return tx.Rollback()
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if err := otx.NotifyCommitted(); err != nil { // wakes the forwarder now; reports unflushed messages
			return err
		}
		fmt.Printf("committed  account %s with its AccountOpened message\n", id)
		return nil
	}
	ids := []string{run + "-1", run + "-2", run + "-3"}
	for i, id := range ids {
		if err := open(id, i != 1); err != nil {
			return fmt.Errorf("account %s: %w", id, err)
		}
	}

	// Same ordering key: 1 then 3. When 3 has arrived, 2 (rolled back) can no longer come.
	var got []string
	for len(got) < 2 {
		select {
		case m := <-received:
			m.Ack()
			if !strings.HasPrefix(m.Metadata.Get("account"), run+"-") {
				continue // left in the table by an earlier, interrupted run
			}
			got = append(got, m.Metadata.Get("account"))
			fmt.Printf("received   AccountOpened for account %s\n", got[len(got)-1])
		case <-ctx.Done():
			return fmt.Errorf("timed out; received %v", got)
		}
	}
	if got[0] != ids[0] || got[1] != ids[2] {
		return fmt.Errorf("received %v, want [%s %s]", got, ids[0], ids[2])
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+accounts+" WHERE id = ?", ids[1]).Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("the rolled-back account row exists")
	}
	fmt.Println("OK: existing-tx: committed messages delivered in order, the rolled-back one never sent")
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
