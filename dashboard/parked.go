package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// filter selects parked rows. Key is the store's own filter (an indexed read); topic,
// error text and age are applied here to the pages Store.ListParked returns.
type filter struct {
	Topic  string        // substring of the destination topic
	Key    string        // exact ordering key; "" = any
	Error  string        // substring of the last error, ignoring case
	MinAge time.Duration // created at least this long ago
	AgeRaw string
	After  outbox.ID // exclusive cursor
}

// parseFilter reads a filter from a query or a form; a malformed value is a message.
func parseFilter(v url.Values) (filter, error) {
	f := filter{Topic: v.Get("topic"), Key: v.Get("key"), Error: v.Get("error"), AgeRaw: strings.TrimSpace(v.Get("age"))}
	if f.AgeRaw != "" {
		d, err := parseAge(f.AgeRaw)
		if err != nil {
			return f, err
		}
		f.MinAge = d
	}
	if a := v.Get("after"); a != "" {
		id, err := outbox.ParseID(a)
		if err != nil {
			return f, fmt.Errorf("after: not a row id")
		}
		f.After = id
	}
	return f, nil
}

// parseAge reads "90s", "15m", "2h" or "3d".
func parseAge(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := time.ParseDuration(n + "h")
		if err == nil && d >= 0 {
			return 24 * d, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("age %q: want a duration such as 90s, 15m, 2h or 3d", s)
}

// Query returns the filter as query parameters (without the cursor).
func (f filter) Query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"topic": f.Topic, "key": f.Key, "error": f.Error, "age": f.AgeRaw} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// QueryURL is Query encoded for a link.
func (f filter) QueryURL() template.URL { return template.URL(f.Query().Encode()) }

// Describe names the filter for confirmations and the mutation log.
func (f filter) Describe() string {
	var parts []string
	for _, p := range [][2]string{{"topic contains", f.Topic}, {"ordering key", f.Key}, {"error contains", f.Error}, {"older than", f.AgeRaw}} {
		if p[1] != "" {
			parts = append(parts, fmt.Sprintf("%s %q", p[0], p[1]))
		}
	}
	if len(parts) == 0 {
		return "all parked rows"
	}
	return strings.Join(parts, ", ")
}

func (f filter) local() bool { return f.Topic != "" || f.Error != "" || f.MinAge > 0 }

func (f filter) match(rec *outbox.Record, now time.Time) bool {
	return strings.Contains(rec.Destination, f.Topic) &&
		(f.Error == "" || strings.Contains(strings.ToLower(rec.LastError), strings.ToLower(f.Error))) &&
		(f.MinAge == 0 || now.Sub(rec.CreatedAt) >= f.MinAge)
}

// A scan reads parked rows in batches that adapt to their size: rows come with their
// payloads (Store.ListParked), so a batch starts at PageSize rows (at least scanBatchMin) and doubles, up
// to scanBatchMax, while a batch's payloads and metadata stay under scanBatchBytes;
// larger ones halve it. Few statements on ordinary rows, bounded memory on huge ones.
const (
	scanBatchMin   = 25
	scanBatchMax   = 400
	scanBatchBytes = 4 << 20
)

func nextBatch(batch int, recs []outbox.Record) int {
	size := 0
	for i := range recs {
		size += len(recs[i].Body) + len(recs[i].Headers)
	}
	if size < scanBatchBytes/2 {
		return min(2*batch, scanBatchMax)
	}
	if size > scanBatchBytes {
		return max(batch/2, 1)
	}
	return batch
}

// scanResult is what a bounded scan found.
type scanResult struct {
	Rows    []outbox.Record // matching rows, payloads dropped
	Scanned int
	Last    outbox.ID // the last row read (the cursor to continue from)
	More    bool      // the scan stopped before the end of the parked rows
}

// scan reads parked rows after f.After in id order, keeping up to want matching rows
// and reading at most budget rows.
func (h *Handler) scan(ctx context.Context, f filter, want, budget int) (scanResult, error) {
	res := scanResult{Last: f.After}
	var key *string
	if f.Key != "" {
		key = &f.Key
	}
	now := h.now().UTC()
	batch := min(max(scanBatchMin, h.config.PageSize), scanBatchMax)
	for {
		limit := min(batch, budget-res.Scanned)
		if !f.local() {
			limit = min(limit, want-len(res.Rows)) // every row matches
		}
		recs, err := h.store.ListParked(ctx, outbox.ParkedQuery{After: res.Last, Limit: limit, OrderingKey: key})
		if err != nil {
			return res, err
		}
		for i := range recs {
			rec := &recs[i]
			res.Last = rec.ID
			res.Scanned++
			if f.match(rec, now) {
				kept := *rec
				kept.Body, kept.Headers = nil, nil
				res.Rows = append(res.Rows, kept)
				if len(res.Rows) == want {
					res.More = true // maybe: the next page says
					return res, nil
				}
			}
		}
		if len(recs) < limit {
			return res, nil
		}
		if res.Scanned >= budget {
			res.More = true
			return res, nil
		}
		batch = nextBatch(batch, recs)
	}
}

// parkedRow is one row of the parked list, every text clipped.
type parkedRow struct {
	ID, UUID                     string
	Topic, Key, Error, Transport shown
	Lane                         int
	Attempts                     int
	Created                      time.Time
	Age                          time.Duration
}

func (h *Handler) parkedRow(rec *outbox.Record, now time.Time) parkedRow {
	uuid, _ := clip(rec.MessageUUID, h.config.FieldBytes)
	return parkedRow{ID: rec.ID.String(), UUID: uuid, Topic: h.show(rec.Destination), Key: h.show(rec.OrderingKey),
		Error: h.show(rec.LastError), Transport: h.show(rec.Transport), Lane: rec.Lane, Attempts: rec.Attempts,
		Created: rec.CreatedAt, Age: max(0, now.Sub(rec.CreatedAt))}
}

type parkedView struct {
	Filter    filter
	Rows      []parkedRow
	Scanned   int
	Next      template.URL // query of the next page; "" at the end (encoded here)
	First     template.URL // query of the first page with this filter (encoded here)
	Filtered  bool
	ScanLimit int
}

func (h *Handler) parkedPage(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.queryContext(r)
	defer cancel()
	v := parkedView{Filter: f, First: template.URL(f.Query().Encode()), Filtered: f.local() || f.Key != "", ScanLimit: h.config.ScanLimit}
	res, err := h.scan(ctx, f, h.config.PageSize, h.config.ScanLimit)
	if err != nil {
		h.render(w, r, http.StatusOK, "parked", v, []string{h.problem("parked rows", err)})
		return
	}
	now := h.now().UTC()
	for i := range res.Rows {
		v.Rows = append(v.Rows, h.parkedRow(&res.Rows[i], now))
	}
	v.Scanned = res.Scanned
	if res.More {
		q := f.Query()
		q.Set("after", res.Last.String())
		v.Next = template.URL(q.Encode())
	}
	h.render(w, r, http.StatusOK, "parked", v, nil)
}

// parkedByID reads one parked row by id: the first parked row after id's predecessor.
func (h *Handler) parkedByID(ctx context.Context, id outbox.ID) (*outbox.Record, error) {
	prev, ok := predecessor(id)
	if !ok {
		return nil, nil
	}
	recs, err := h.store.ListParked(ctx, outbox.ParkedQuery{After: prev, Limit: 1})
	if err != nil || len(recs) == 0 || recs[0].ID != id {
		return nil, err
	}
	return &recs[0], nil
}

// predecessor returns the id just below id in byte order; false for the zero id.
func predecessor(id outbox.ID) (outbox.ID, bool) {
	if id.IsZero() {
		return id, false
	}
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] > 0 {
			id[i]--
			return id, true
		}
		id[i] = 0xff
	}
	return id, true
}
