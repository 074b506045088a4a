// Command insertshape measures what each part of the MySQL rows table costs a
// transaction of 1,000 rows written as the store writes them (prepared multi-row INSERTs
// of 64 rows, the tail in one more prepared statement): the same table as before
// 2026-12-07 (primary key id, index (status, lane, id)) with one thing changed at a
// time, side by side with mysql.Store.Insert itself and with the minimal outbox row of
// outboxbench's publish section (id, topic, payload, metadata; primary key only, one
// INSERT). Each transaction also inserts one business row, as outboxbench's do. The
// shapes take turns transaction by transaction (the order rotating); it prints each
// one's median time and the median of its per-round rate against the minimal row
// (minimal time / its time, higher is better).
//
//	go run ./cmd/insertshape -dsn 'root@tcp(127.0.0.1:3306)/test' -rounds 60
//	go run ./cmd/insertshape -only 'no secondary index;PK (lane, id)'
//
// It creates and drops tables named ws_*.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
)

var (
	nrows   *int
	body    = []byte(`{"order_id":"0123456789","customer":"c-42","amount":1999,"currency":"EUR","pad":"` + strings.Repeat("x", 110) + `"}`)
	headers = []byte("\x01\x00\x00\x00\x03\x00\x00\x00\x08\x00\x00\x00trace_id\x10\x00\x00\x000123456789abcdef\x04\x00\x00\x00type\x0d\x00\x00\x00order.created\x01\x00\x00\x00v\x01\x00\x00\x001")
)

const baseCols = `
    id               BINARY(16)      NOT NULL,
    message_uuid     %s    NOT NULL DEFAULT '',
    lane             INT             NULL,
    ordering_key     VARBINARY(1024) NULL,
    transport        VARCHAR(255)    NOT NULL DEFAULT '',
    destination      %s   NOT NULL,
    message_type     VARCHAR(255)    NULL,
    headers          LONGBLOB        NOT NULL,
    body             LONGBLOB        NOT NULL,
    tenant_id        VARCHAR(255)    NULL,
    created_at       DATETIME(6)     NOT NULL,
    deliver_at       DATETIME(6)     NOT NULL %s,
    attempts         INT             NOT NULL DEFAULT 0,
    last_error       TEXT            NULL,
    status           %s     NOT NULL DEFAULT %s,
    claim_token      BINARY(16)      NULL,
    claim_expires_at DATETIME(6)     NULL,
    PRIMARY KEY (id)%s%s
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

const checks = `,
    CHECK (id <> X'00000000000000000000000000000000'),
    CHECK (lane >= 0),
    CHECK (LENGTH(headers) >= 8),
    CHECK (attempts >= 0),
    CHECK (status IN ('pending', 'parked')),
    CHECK ((claim_token IS NULL AND claim_expires_at IS NULL)
        OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND claim_token <> X'00000000000000000000000000000000'))`

type variant struct {
	name      string
	uuidType  string
	destType  string
	deliver   string // "DEFAULT (created_at)" or ""
	status    string
	statusDef string
	index     string
	checks    bool
	timeBin   bool // time.Time args
	sendDel   bool // deliver_at named
	pkLane    bool // PRIMARY KEY (lane, id), lane NOT NULL named (-1)
	// keys (with pkLane) replaces the primary key clause and adds a database-assigned
	// ordering column seq BIGINT AUTO_INCREMENT (issue 36's lane order).
	keys string
	// seqArg, when seqNamed, is the value every row gives seq: -1 (an unordered row,
	// kept out of the lanes' order) or nil (assigned by AUTO_INCREMENT).
	seqNamed bool
	seqArg   any
}

func (v variant) ddl(table string) string {
	c := ""
	if v.checks {
		c = checks
	}
	d := "CREATE TABLE " + table + " (" + fmt.Sprintf(baseCols, v.uuidType, v.destType, v.deliver, v.status, v.statusDef, v.index, c)
	if v.pkLane {
		d = strings.Replace(d, "PRIMARY KEY (id)", "PRIMARY KEY (lane, id)", 1)
		d = strings.Replace(d, "lane             INT             NULL", "lane             INT             NOT NULL", 1)
		d = strings.Replace(d, "CHECK (lane >= 0)", "CHECK (lane >= -1)", 1)
	}
	if v.keys != "" {
		d = strings.Replace(d, "PRIMARY KEY (lane, id)", "seq BIGINT NOT NULL AUTO_INCREMENT,\n    "+v.keys, 1)
	}
	return d
}

func (v variant) cols() []string {
	c := []string{"id", "message_uuid", "destination", "headers", "body", "created_at"}
	if v.sendDel {
		c = append(c, "deliver_at")
	}
	if v.pkLane {
		c = append(c, "lane")
	}
	if v.seqNamed {
		c = append(c, "seq")
	}
	return c
}

func stmtText(table string, cols []string, rows int) string {
	row := "(" + strings.Repeat("?,", len(cols)-1) + "?)"
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}

type runner interface {
	name() string
	tx(ctx context.Context, n int) error
}

type varRunner struct {
	v        variant
	db       *sql.DB
	table    string
	g64, g40 *sql.Stmt
}

func (r *varRunner) name() string { return r.v.name }

func (r *varRunner) tx(ctx context.Context, n int) error {
	return businessTx(ctx, r.db, func(tx *sql.Tx) error { return r.insert(ctx, tx, n) })
}

func (r *varRunner) insert(ctx context.Context, tx *sql.Tx, n int) error {
	now := time.Now().UTC()
	ts := now.Format("2006-01-02 15:04:05.000000")
	args := make([]any, 0, 64*7)
	for done := 0; done < n; {
		k := min(64, n-done)
		st := r.g64
		if k != 64 {
			st = r.g40
		}
		args = args[:0]
		for range k {
			id := outbox.NewID()
			args = append(args, id[:], watermill.NewUUID(), "orders", headers, body)
			if r.v.timeBin {
				args = append(args, now)
			} else {
				args = append(args, ts)
			}
			if r.v.sendDel {
				args = append(args, args[len(args)-1])
			}
			if r.v.pkLane {
				args = append(args, -1)
			}
			if r.v.seqNamed {
				args = append(args, r.v.seqArg)
			}
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return err
		}
		done += k
	}
	return nil
}

type storeRunner struct {
	db *sql.DB
	s  *mysql.Store
}

func (r *storeRunner) name() string { return "ours (mysql.Store.Insert)" }
func (r *storeRunner) tx(ctx context.Context, n int) error {
	now := time.Now().UTC()
	recs := make([]outbox.Record, n)
	for i := range recs {
		recs[i] = outbox.Record{ID: outbox.NewID(), MessageUUID: watermill.NewUUID(), Lane: outbox.Unordered, Destination: "orders", Headers: headers, Body: body, CreatedAt: now}
	}
	return businessTx(ctx, r.db, func(tx *sql.Tx) error { return r.s.Insert(ctx, tx, recs) })
}

type minimalRunner struct {
	db *sql.DB
	q  string
}

func (r *minimalRunner) name() string { return "minimal row" }
func (r *minimalRunner) tx(ctx context.Context, n int) error {
	if r.q == "" {
		r.q = stmtText("ws_minimal", []string{"id", "topic", "payload", "metadata"}, n)
	}
	args := make([]any, 0, 4*n)
	for range n {
		id := outbox.NewID()
		args = append(args, id[:], "orders", body, headers)
	}
	return businessTx(ctx, r.db, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, r.q, args...)
		return err
	})
}

// businessTx runs one business INSERT and then fn in one transaction, and commits.
func businessTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO ws_orders (customer, amount) VALUES (?, ?)", "c-42", 1999); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func main() {
	dsn := flag.String("dsn", "root@tcp(127.0.0.1:3306)/test", "MariaDB/MySQL DSN")
	rounds := flag.Int("rounds", 40, "transactions per shape (after 3 untimed rounds)")
	nrows = flag.Int("n", 1000, "rows per transaction")
	only := flag.String("only", "", "semicolon-separated shape names (default: all)")
	flag.Parse()
	ctx := context.Background()
	db, err := sql.Open("mysql", *dsn)
	must(err)
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	exec := func(q string) { _, err := db.ExecContext(ctx, q); must(err) }
	exec("DROP TABLE IF EXISTS ws_orders")
	exec("CREATE TABLE ws_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)")
	exec("DROP TABLE IF EXISTS ws_minimal")
	exec("CREATE TABLE ws_minimal (id BINARY(16) NOT NULL PRIMARY KEY, topic VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, metadata BLOB)")
	opts := outbox.Options{TablePrefix: "ws_store_"}
	for _, t := range []string{"outbox", "outbox_lanes", "outbox_nodes", "inbox", "inbox_lease"} {
		exec("DROP TABLE IF EXISTS ws_store_" + t)
	}
	st, err := mysql.New(db, opts)
	must(err)
	must(st.CreateSchema(ctx))

	base := variant{uuidType: "VARCHAR(255)", destType: "VARCHAR(1024)", deliver: "DEFAULT (created_at)", status: "VARCHAR(16)", statusDef: "'pending'", index: ",\n KEY ix (status, lane, id)", checks: true}
	vs := []variant{}
	add := func(name string, f func(v *variant)) { v := base; v.name = name; f(&v); vs = append(vs, v) }
	add("same table", func(v *variant) {})
	add("time.Time binary", func(v *variant) { v.timeBin = true })
	add("index (lane, id)", func(v *variant) { v.index = ",\n KEY ix (lane, id)" })
	add("no secondary index", func(v *variant) { v.index = "" })
	add("uuid+dest VARBINARY", func(v *variant) { v.uuidType = "VARBINARY(255)"; v.destType = "VARBINARY(1024)" })
	add("deliver_at sent", func(v *variant) { v.deliver = ""; v.sendDel = true })
	add("no CHECKs", func(v *variant) { v.checks = false })
	add("status TINYINT", func(v *variant) { v.status = "TINYINT"; v.statusDef = "0" })
	add("PK (lane, id)", func(v *variant) { v.pkLane = true; v.index = "" })
	seq := func(name, keys string) {
		add(name, func(v *variant) { v.pkLane = true; v.index = ""; v.keys = keys })
	}
	seq("seq: PK (lane, id), KEY (lane, seq), KEY (seq)", "PRIMARY KEY (lane, id), KEY ix_lane_seq (lane, seq), KEY ix_seq (seq)")
	seq("seq: PK (lane, seq), KEY (seq)", "PRIMARY KEY (lane, seq), KEY ix_seq (seq)")
	seq("seq: PK (lane, seq), KEY (seq), KEY (lane, id)", "PRIMARY KEY (lane, seq), KEY ix_seq (seq), KEY ix_id (lane, id)")
	seq("seq: PK (seq)", "PRIMARY KEY (seq)")
	add("seq: PK (lane, seq, id), KEY (seq), unordered rows (seq -1)", func(v *variant) {
		v.pkLane, v.index, v.keys, v.seqNamed, v.seqArg = true, "", "PRIMARY KEY (lane, seq, id), KEY ix_seq (seq)", true, -1
	})
	add("seq: PK (lane, seq, id), KEY (seq), ordered rows (seq NULL)", func(v *variant) {
		v.pkLane, v.index, v.keys, v.seqNamed, v.seqArg = true, "", "PRIMARY KEY (lane, seq, id), KEY ix_seq (seq)", true, nil
	})
	seq("seq: PK (lane, id), KEY (seq)", "PRIMARY KEY (lane, id), KEY ix_seq (seq)")
	seq("seq: PK (seq), KEY (lane), KEY (lane, id)", "PRIMARY KEY (seq), KEY ix_lane (lane), KEY ix_id (lane, id)")
	add("PK (lane, id) + index (message_uuid)", func(v *variant) { v.pkLane = true; v.index = ",\n KEY ix_uuid (message_uuid)" })
	add("TINYINT status, index (lane, id), no CHECKs", func(v *variant) {
		v.status = "TINYINT"
		v.statusDef = "0"
		v.checks = false
		v.index = ",\n KEY ix (lane, id)"
	})

	runners := []runner{&minimalRunner{db: db}, &storeRunner{db: db, s: st}}
	for i, v := range vs {
		if *only != "" && !slices.Contains(strings.Split(*only, ";"), v.name) {
			continue
		}
		table := fmt.Sprintf("ws_v%d", i)
		exec("DROP TABLE IF EXISTS " + table)
		exec(v.ddl(table))
		g64, err := db.PrepareContext(ctx, stmtText(table, v.cols(), 64))
		must(err)
		g40, err := db.PrepareContext(ctx, stmtText(table, v.cols(), max(1, *nrows%64)))
		must(err)
		runners = append(runners, &varRunner{v: v, db: db, table: table, g64: g64, g40: g40})
	}
	times := make([][]float64, len(runners))
	ratios := make([][]float64, len(runners))
	for round := -3; round < *rounds; round++ {
		d := make([]time.Duration, len(runners))
		for k := range runners {
			i := (k + round + 3) % len(runners)
			t0 := time.Now()
			must(runners[i].tx(ctx, *nrows))
			d[i] = time.Since(t0)
		}
		if round < 0 {
			continue
		}
		for i := range runners {
			times[i] = append(times[i], float64(d[i].Microseconds()))
			ratios[i] = append(ratios[i], float64(d[0])/float64(d[i]))
		}
		if round%10 == 9 { // keep tables small
			exec("DELETE FROM ws_minimal")
			exec("DELETE FROM ws_store_outbox")
			for i := range vs {
				db.ExecContext(ctx, fmt.Sprintf("DELETE FROM ws_v%d", i))
			}
		}
	}
	for i, r := range runners {
		fmt.Printf("%-28s %8.0f µs  rate minimal/this %.3f\n", r.name(), med(times[i]), med(ratios[i]))
	}
}

func med(x []float64) float64 { s := slices.Clone(x); slices.Sort(s); return s[len(s)/2] }

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
