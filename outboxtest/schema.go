package outboxtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

func schemaTests() []subtest {
	return []subtest{
		{"CreateSchemaTwice", testCreateSchemaTwice},
		{"InvalidOptions", testInvalidOptions},
		{"OptionsDefaults", testOptionsDefaults},
		{"QuotePrefix", testQuotePrefix},
	}
}

// The DDL is idempotent: a second run (as a deployment tool would do) changes nothing
// and the store still works.
func testCreateSchemaTwice(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	if err := e.store.CreateSchema(e.ctx); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	// A store built afresh over existing tables runs it a third time.
	s2, err := h.NewStore(h.DB, e.opts)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	if err := s2.CreateSchema(e.ctx); err != nil {
		t.Fatalf("third CreateSchema: %v", err)
	}
	sameIDs(t, "rows after re-running the schema", e.readIDs(outbox.Unordered, at(0)), idsOf(r))
}

// Every invalid prefix of the dialect, and the dialect-independent option rules, fail
// at construction with an error wrapping ErrInvalidOptions that names the problem.
func testInvalidOptions(t *testing.T, h Harness) {
	cases := []struct {
		name     string
		opts     outbox.Options
		contains string
	}{
		{"NUL in prefix", outbox.Options{TablePrefix: "a\x00b"}, "TablePrefix"},
		{"invalid UTF-8 prefix", outbox.Options{TablePrefix: "a\xffb"}, "TablePrefix"},
		{"negative Lanes", outbox.Options{Lanes: -1}, "Lanes"},
		{"Lanes above LanesMax", outbox.Options{Lanes: outbox.LanesMax + 1}, "Lanes"},
	}
	for _, p := range h.InvalidPrefixes {
		cases = append(cases, struct {
			name     string
			opts     outbox.Options
			contains string
		}{"dialect prefix " + quote(p.Prefix), outbox.Options{TablePrefix: p.Prefix}, p.ErrContains})
	}
	if len(h.InvalidPrefixes) == 0 {
		t.Errorf("Harness.InvalidPrefixes is empty: list the prefixes %s rejects (too long, ...)", h.Name)
	}
	for _, c := range cases {
		s, err := h.NewStore(h.DB, c.opts)
		if err == nil {
			t.Errorf("%s: NewStore accepted %+v (store %T)", c.name, c.opts, s)
			continue
		}
		if !errors.Is(err, outbox.ErrInvalidOptions) {
			t.Errorf("%s: error %q does not wrap outbox.ErrInvalidOptions", c.name, err)
		}
		if !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: error %q does not contain %q", c.name, err, c.contains)
		}
	}
}

// Options() reports the validated options with defaults applied.
func testOptionsDefaults(t *testing.T, h Harness) {
	prefix := testenv.Prefix(t)
	s, err := h.NewStore(h.DB, outbox.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	got := s.Options()
	if got.Lanes != outbox.LanesDefault || got.TablePrefix != prefix {
		t.Fatalf("Options() = %+v; want TablePrefix %q and Lanes %d", got, prefix, outbox.LanesDefault)
	}
}

// A prefix holding the dialect's quote character is quoted, not injected, and every
// table works end to end through it.
func testQuotePrefix(t *testing.T, h Harness) {
	if h.QuotePrefix == "" {
		t.Fatalf("Harness.QuotePrefix is empty: give a valid prefix holding %s's identifier quote character", h.Name)
	}
	e := newEnvWith(t, h, outbox.Options{TablePrefix: testenv.Prefix(t) + h.QuotePrefix, Lanes: testLanes})
	if err := e.store.CreateSchema(e.ctx); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	key := keysInLane(3, testLanes, 1)[0]
	u, l := NewRecord(at(0)), laneRecord(key, at(0))
	e.insert(u, l)
	got := e.read(outbox.Unordered, outbox.ID{}, at(0), 10)
	if len(got) != 1 {
		t.Fatalf("Read = %d rows, want 1", len(got))
	}
	checkRecord(t, "unordered row", got[0], stored(u))
	if n := e.count(at(0)); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}
	// The rows are in the table whose name holds the quote character, not in a table
	// named with it stripped or mangled.
	if n := e.rawCount(e.opts.OutboxTable()); n != 2 {
		t.Fatalf("table %s holds %d rows, want 2", e.outboxTable(), n)
	}
	lease := e.acquire(3)
	tok, claimed := e.claimLane(3, 10, lease, at(0), at(time.Minute))
	sameIDs(t, "lane claim", ids(claimed), idsOf(l))
	n, err := e.store.Complete(e.ctx, outbox.CompleteParams{Token: tok, IDs: idsOf(l), Now: at(time.Second), Lane: 3, Lease: lease})
	wantN(t, "Complete", n, err, 1)
	e.park(u.ID, "quoted", at(0))
	if p := e.parked(); len(p) != 1 || p[0].ID != u.ID {
		t.Fatalf("ListParked = %v, want the parked row", ids(p))
	}
	st, err := e.store.Stats(e.ctx, at(0))
	if err != nil || st.Parked != 1 {
		t.Fatalf("Stats = %+v, %v; want 1 parked", st, err)
	}
	if ls, err := e.store.Leases(e.ctx); err != nil || len(ls) != 1 {
		t.Fatalf("Leases = %+v, %v; want one", ls, err)
	}
	if err := e.store.Heartbeat(e.ctx, "node`\"]'", time.Minute); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if m, err := e.store.Members(e.ctx); err != nil || len(m) != 1 || m[0] != "node`\"]'" {
		t.Fatalf("Members = %q, %v", m, err)
	}
	if max, err := e.store.MaxLane(e.ctx); err != nil || max != outbox.Unordered {
		t.Fatalf("MaxLane = %d, %v; want %d (lane row completed, unordered row parked)", max, err, outbox.Unordered)
	}
}
