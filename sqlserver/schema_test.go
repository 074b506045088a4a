package sqlserver

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the output (run go test -run %s -update and review the diff):\n%s", path, t.Name(), got)
	}
}

// allQueries lists every DML statement of q, dynamic ones at sample sizes.
func allQueries(q *queries) []string {
	return []string{
		q.readUnordered, q.readLane, q.claimUnordered, q.claimLane, q.claimLaneHold,
		q.lockUnordered, q.lockedDelete(2), q.lockedClaim(2), q.lockedFail,
		q.renew(0, false), q.renew(0, true), q.renew(3, false), q.renew(3, true),
		q.release(0, false), q.release(2, true),
		q.complete(2, false), q.complete(2, true), q.fail, q.failFenced, q.park,
		q.laneRun, q.parkedKeys, q.completeLane(2), q.failLane,
		q.count, q.stats, q.maxLane, q.seqMissing, q.nextPendingLane, q.parkedAny, q.parkedKey, q.parkedNullKey,
		q.requeueAll, q.requeueKey, q.requeueNullKey, q.requeueIDs(2),
		q.purgeAll, q.purgeKey, q.purgeNullKey, q.purgeIDs(2),
		q.acquireLease, q.renewLease, q.releaseLease, q.leases,
		q.heartbeat, q.members, q.leave, q.insert(2), schemaLock, schemaUnlock,
		q.inboxRecord, q.inboxDuplicate, q.inboxPrune, q.inboxNextConsumer, q.inboxConsumer, q.inboxOldest, q.inboxEstimate, q.inboxAcquire, q.inboxRelease,
	}
}

func TestCreateScriptGolden(t *testing.T) {
	for _, c := range []struct {
		file string
		opts outbox.Options
	}{
		// The default schema (dbo) always exists: nothing creates it.
		{"create_default.sql", outbox.Options{}},
		{"create_custom.sql", outbox.Options{Schema: "messaging", TablePrefix: "orders_"}},
		{"create_quoted.sql", outbox.Options{Schema: "sch]ema'", TablePrefix: "o]'[_"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			script, err := CreateScript(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lex(script); err != nil {
				t.Fatalf("script does not lex: %v", err)
			}
			golden(t, c.file, script)
		})
	}
}

// The store's statements are reviewed as text like the DDL.
func TestQueriesGolden(t *testing.T) {
	qs := allQueries(newQueries(newNames(outbox.Options{})))
	for _, q := range qs {
		if _, err := lex(q); err != nil {
			t.Fatalf("%v in %s", err, q)
		}
	}
	golden(t, "queries_default.sql", strings.Join(qs, "\n\n")+"\n")
}

// A named schema is created when missing (as PostgreSQL's CREATE SCHEMA IF NOT EXISTS);
// the default one (dbo) always exists.
func TestCreateScriptCreatesNamedSchema(t *testing.T) {
	named, _ := CreateScript(outbox.Options{Schema: "m"})
	dbo, _ := CreateScript(outbox.Options{})
	if !strings.Contains(named, "IF SCHEMA_ID(N'm') IS NULL") || !strings.Contains(named, "CREATE SCHEMA [m]") || strings.Contains(dbo, "CREATE SCHEMA") {
		t.Fatalf("CREATE SCHEMA must appear, guarded, exactly for a named schema:\n%s", named)
	}
}

// Every CREATE and ALTER INDEX is guarded, so the script runs twice; the store runs the same
// statements as the script.
func TestCreateScriptIdempotentGuards(t *testing.T) {
	opts := outbox.Options{Schema: "m", TablePrefix: "p_"}
	stmts := createStatements(opts.WithDefaults())
	for _, s := range stmts {
		if (strings.Contains(s, "CREATE ") || strings.Contains(s, "ALTER INDEX")) && !strings.HasPrefix(s, "IF ") {
			t.Errorf("unguarded statement:\n%s", s)
		}
	}
	script, err := CreateScript(opts)
	if err != nil {
		t.Fatal(err)
	}
	if script != strings.Join(stmts, "\n\n")+"\n" {
		t.Fatal("CreateScript and the store's statements differ")
	}
	st, err := New(openUnreachable(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(st.script, "\n\n")+"\n" != script {
		t.Fatal("Store.CreateSchema would run other statements than CreateScript returns")
	}
}

func TestCreateScriptInvalidOptions(t *testing.T) {
	_, err := CreateScript(outbox.Options{TablePrefix: strings.Repeat("p", 200)})
	if err == nil || !strings.Contains(err.Error(), "TablePrefix") {
		t.Fatalf("CreateScript with a 200-character prefix: %v", err)
	}
}

// Every index of the outbox table disallows page locks (READPAST skips row locks only),
// on creation and, for tables of earlier versions, by a guarded ALTER INDEX; the other
// tables keep the defaults.
func TestOutboxIndexesRowLocksOnly(t *testing.T) {
	n := newNames(outbox.Options{}.WithDefaults())
	script, err := CreateScript(outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, "PRIMARY KEY CLUSTERED (id) WITH (ALLOW_PAGE_LOCKS = OFF)") {
		t.Error("the outbox's primary key allows page locks")
	}
	for _, ix := range []string{n.ixPending, n.ixParked, n.ixClaims} {
		if !regexp.MustCompile(`CREATE INDEX \[` + ix + `\] ON \[dbo\]\.\[outbox\] [^;]* WITH \(ALLOW_PAGE_LOCKS = OFF\);`).MatchString(script) {
			t.Errorf("index %s allows page locks", ix)
		}
	}
	for _, ix := range []string{n.outboxPK, n.ixPending, n.ixParked, n.ixClaims} {
		alter := "AND allow_page_locks = 1)\n    ALTER INDEX [" + ix + "] ON [dbo].[outbox] SET (ALLOW_PAGE_LOCKS = OFF);"
		if !strings.Contains(script, alter) {
			t.Errorf("no guarded ALTER INDEX for %s", ix)
		}
	}
	if got := strings.Count(script, "ALLOW_PAGE_LOCKS = OFF"); got != 9 {
		t.Errorf("ALLOW_PAGE_LOCKS = OFF appears %d times, want 9 (5 indexes, 4 upgrades: ix_lane_seq is new with seq, created without page locks)", got)
	}
}
