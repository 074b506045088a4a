package sqlserver

import (
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// FindRows' statements, the inbox lookup and FindIndexScript are reviewed as text like
// the DDL (SQL Server cannot run here): each lexes, and the golden file holds them.
func TestFindGolden(t *testing.T) {
	opts, err := validateOptions(outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := newQueries(newNames(opts))
	from := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var parts []string
	script, err := FindIndexScript(outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	parts = append(parts, "-- FindIndexScript\n"+script)
	for _, c := range []struct {
		name    string
		q       outbox.FindQuery
		indexed bool
	}{
		{"uuid, index", outbox.FindQuery{MessageUUID: "u"}, true},
		{"uuid in a window, no index", outbox.FindQuery{MessageUUID: "u", From: from, To: from.Add(time.Hour)}, false},
		{"ordering key", outbox.FindQuery{OrderingKey: "order-42"}, false},
		{"topic since", outbox.FindQuery{Topic: "orders", From: from}, false},
	} {
		for _, st := range findStatements(q.outbox, opts.Lanes, c.q.WithDefaults(), c.indexed) {
			if _, err := lex(st.query); err != nil {
				t.Fatalf("%s: %v in %s", c.name, err, st.query)
			}
			parts = append(parts, "-- "+c.name+"\n"+st.query+"\n")
		}
	}
	inbox := inboxFindStatement(q.inbox)
	if _, err := lex(inbox); err != nil {
		t.Fatalf("inbox: %v", err)
	}
	parts = append(parts, "-- inbox entries of a UUID\n"+inbox+"\n")
	free, present := q.lockedRowsStatements(2)
	for _, st := range []string{free, present} {
		if _, err := lex(st); err != nil {
			t.Fatalf("locked rows: %v in %s", err, st)
		}
	}
	parts = append(parts, "-- locked rows: the lockable ones, then the present ones\n"+free+"\n"+present+"\n")
	golden(t, "find_default.sql", strings.Join(parts, "\n"))
}
