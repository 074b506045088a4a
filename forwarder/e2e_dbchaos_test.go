package forwarder_test

import (
	"context"
	"database/sql"
	"io"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestE2E_DatabaseConnectionsKilled (CI variant of the database restart): while 4
// writers publish and a forwarder forwards, every server connection of the test's own
// MariaDB user is killed five times. Publishers (the next transaction) and the forwarder
// recover unaided; nothing is lost, per-key order holds, and duplicates stay within the
// in-flight window per disruption (plus rows a writer rewrote after a commit with an
// unknown outcome).
//
// With OUTBOX_CHAOS_RESTART=1 (make chaos) the local MariaDB or Oracle MySQL server itself is stopped
// and started once instead; that disturbs every other user of the server.
func TestE2E_DatabaseConnectionsKilled(t *testing.T) {
	testDatabaseChaos(t, os.Getenv("OUTBOX_CHAOS_RESTART") == "1")
}

func testDatabaseChaos(t *testing.T, restart bool) {
	const (
		lanesN   = 16
		keys     = 50
		inFlight = 64
		kills    = 5
	)
	e := chaos.MariaDB
	// The driver logs every connection it finds killed; that is the point here.
	_ = mysqldriver.SetLogger(log.New(io.Discard, "", 0))
	t.Cleanup(func() { _ = mysqldriver.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime|log.Lshortfile)) })
	root, rootDSN := e.Open(t)
	user, userDSN := chaos.MariaDBUser(t, root, rootDSN)
	db := e.OpenDSN(t, userDSN)
	rootStore := e.Table(t, root, lanesN) // created and dropped by root
	store, err := e.NewStore(db, rootStore.Options())
	if err != nil {
		t.Fatal(err)
	}
	rec := chaos.NewRecorder()
	fwd := chaos.NewForwarder(t, store, forwarder.Targets{"": &chaos.RecordingPublisher{Recorder: rec}}, forwarder.Config{
		InFlight: inFlight, ClaimTTL: 3 * time.Second, RetryBase: 50 * time.Millisecond, RetryMax: time.Second,
	})
	chaos.RunForwarder(t, fwd)
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	total := 6000
	if chaos.FullRun() {
		total = 30000
	}
	msgs := append(chaos.KeyedMessages(total*2/3, keys, "db"), chaos.KeyedMessages(total/3, 0, "db")...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var ws *chaos.WriteStats
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ws, werr = chaos.WriteAll(ctx, ob, db, "db", slices.Clone(msgs), 4, 20)
	}()

	events, killed := 0, 0
	if restart {
		rec.WaitUnique(total/4, 20*time.Second, time.Minute)
		addr, service := restartTarget(t, root, rootDSN)
		t.Logf("restarting %s at %s after %d deliveries", service, addr, rec.Unique())
		if err := chaos.RestartMySQL(ctx, root, addr, time.Second, service); err != nil {
			t.Fatalf("restart: %v (the server may be down: start it with scripts/services %s)", err, service)
		}
		events = 1
	} else {
		for i := 0; i < kills; i++ {
			rec.WaitUnique(total*(i+1)/(kills+2), 20*time.Second, time.Minute)
			n, err := chaos.KillUserConnections(ctx, root, user)
			if err != nil {
				t.Fatal(err)
			}
			events++
			killed += n
			time.Sleep(200 * time.Millisecond)
		}
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	ok := rec.WaitUnique(len(msgs), 20*time.Second, 2*time.Minute)
	s := chaos.CheckDelivered(t, rec, chaos.UUIDsOf(msgs))
	bound := events*(inFlight+lanesN) + ws.UnknownRetried
	t.Logf("disruptions=%d connections killed=%d, writer tx retries=%d (unknown outcome: %d messages rewritten), all delivered=%v, duplicates=%d (bound %d)",
		events, killed, ws.Retries, ws.UnknownRetried, ok, s.Duplicates, bound)
	if s.Duplicates > bound {
		t.Errorf("%d duplicates, more than the in-flight window allows (%d)", s.Duplicates, bound)
	}
	if !restart && killed == 0 {
		t.Error("no connection was killed: the test disturbed nothing")
	}
	e.WaitEmpty(t, root, store.Options(), 15*time.Second)
}

// restartTarget returns the address of the server behind dsn and the scripts/services
// name that starts it again: "mysql" (MariaDB) or "mysql-oracle" (Oracle MySQL).
func restartTarget(t *testing.T, db *sql.DB, dsn string) (addr, service string) {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var version string
	if err := db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(version, "MariaDB") {
		return cfg.Addr, "mysql"
	}
	return cfg.Addr, "mysql-oracle"
}
