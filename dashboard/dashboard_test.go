package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/dashboard"
	"github.com/relayer-go/watermill-outbox/internal/dashseed"
)

func TestInboxView(t *testing.T) {
	store, _ := dashseed.Open(t, dashseed.Services[1], "", false)
	seed(t, store)
	h, err := dashboard.New(store, dashboard.Config{}, nil)
	must(t, err)
	_, body := newClient(t, h).get("inbox")
	if !strings.Contains(body, `<div class="v" id="entries">3</div>`) || !strings.Contains(body, `<div class="v" id="duplicates">1</div>`) {
		t.Errorf("inbox page lacks 3 entries and 1 duplicate:\n%s", body)
	}
}

func TestConfigValidate(t *testing.T) {
	store := fakeStore{}
	if _, err := dashboard.New(nil, dashboard.Config{}, nil); !errors.Is(err, dashboard.ErrNoStore) {
		t.Errorf("nil store: %v", err)
	}
	for field, c := range map[string]dashboard.Config{
		"PageSize":        {PageSize: dashboard.PageSizeMax + 1},
		"ScanLimit":       {ScanLimit: -1},
		"RefreshInterval": {RefreshInterval: time.Millisecond},
		"PreviewBytes":    {PreviewBytes: dashboard.PreviewBytesMax + 1},
		"TrustedOrigins":  {TrustedOrigins: []string{"not a url"}},
	} {
		_, err := dashboard.New(store, c, nil)
		if !errors.Is(err, dashboard.ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
	if _, err := dashboard.New(store, dashboard.Config{}, nil); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// fakeStore satisfies the interface for construction only (no I/O happens in New).
type fakeStore struct{ outbox.Store }

func seed(t *testing.T, store outbox.Store) dashseed.Seeded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := dashseed.Standard(ctx, store)
	must(t, err)
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, h http.Handler) *client {
	srv := httptest.NewServer(http.StripPrefix("/outbox", h))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: srv.URL + "/outbox/", http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	resp, err := c.http.Get(c.base + path)
	must(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(c.t, err)
	return resp.StatusCode, string(b)
}

func (c *client) post(form url.Values, origin string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+"action", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.http.Do(req)
	must(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func overviewJSON(t *testing.T, c *client) map[string]any {
	t.Helper()
	code, body := c.get("api/overview")
	if code != 200 {
		t.Fatalf("api/overview: %d %s", code, body)
	}
	var v map[string]any
	must(t, json.Unmarshal([]byte(body), &v))
	return v
}

var dataID = regexp.MustCompile(`<tr data-id="`)

func TestDashboard(t *testing.T) {
	for _, service := range dashseed.Services {
		t.Run(service, func(t *testing.T) {
			t.Parallel()
			store, _ := dashseed.Open(t, service, "", false)
			s := seed(t, store)
			logs := watermill.NewCaptureLogger()
			h, err := dashboard.New(store, dashboard.Config{AllowMutations: true,
				Actor: func(*http.Request) string { return "alice" }}, logs)
			must(t, err)
			c := newClient(t, h)
			t.Run("overview", func(t *testing.T) { checkOverview(t, c, s) })
			t.Run("parked", func(t *testing.T) { checkParked(t, c, s) })
			t.Run("paging", func(t *testing.T) { checkPaging(t, store, s) })
			t.Run("find", func(t *testing.T) { checkFind(t, c, store) })
			t.Run("hostile", func(t *testing.T) { checkHostile(t, c, s) })
			t.Run("mutations", func(t *testing.T) { checkMutations(t, c, store, s); checkLogged(t, logs, s) })
			t.Run("readonly", func(t *testing.T) { checkReadOnly(t, store, s) })
		})
	}
}

func checkOverview(t *testing.T, c *client, s dashseed.Seeded) {
	v := overviewJSON(t, c)
	for k, want := range map[string]float64{"ordered": 4, "unordered": 3, "waiting": 2, "pending": 9, "parked": float64(s.Parked())} {
		if v[k] != want {
			t.Errorf("%s = %v, want %v", k, v[k], want)
		}
	}
	code, body := c.get("")
	if code != 200 || !strings.Contains(body, `data-k="ordered">4<`) || !strings.Contains(body, `data-k="unordered">3<`) {
		t.Errorf("overview page: %d\n%s", code, body)
	}
	if code, body := c.get("lanes?sort=backlog&dir=desc"); code != 200 || !strings.Contains(body, "eligible rows, no live lease") {
		t.Errorf("lanes page: %d\n%s", code, body)
	}
}

func checkParked(t *testing.T, c *client, s dashseed.Seeded) {
	_, all := c.get("parked")
	if n := len(dataID.FindAllString(all, -1)); n != s.Parked() {
		t.Errorf("parked list shows %d rows, want %d", n, s.Parked())
	}
	for q, want := range map[string]int{"topic=payments": 2, "error=smtp": 3, "key=p1": 1, "topic=emails&age=1h": 0, "topic=emails&age=30s": 3} {
		_, body := c.get("parked?" + q)
		if n := len(dataID.FindAllString(body, -1)); n != want {
			t.Errorf("parked?%s shows %d rows, want %d", q, n, want)
		}
	}
	_, body := c.get("row?id=" + s.ParkedPayments[0].String())
	if !strings.Contains(body, "&#34;amount&#34;: 12.5") {
		t.Errorf("row view lacks the pretty-printed JSON payload:\n%s", body)
	}
	if code, _ := c.get("row?id=" + outbox.NewID().String()); code != 404 {
		t.Errorf("unknown row: %d, want 404", code)
	}
}

// checkPaging: nine parked rows, four a page, each row once; the last page has no next
// link.
var nextLink = regexp.MustCompile(`<a id="next" href="parked\?([^"]+)">`)

func checkPaging(t *testing.T, store outbox.Store, s dashseed.Seeded) {
	h, err := dashboard.New(store, dashboard.Config{PageSize: 4}, nil)
	must(t, err)
	c := newClient(t, h)
	seen := map[string]bool{}
	q := ""
	for page := 1; ; page++ {
		_, body := c.get("parked?" + q)
		for _, m := range regexp.MustCompile(`<tr data-id="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Errorf("row %s listed twice", m[1])
			}
			seen[m[1]] = true
		}
		m := nextLink.FindStringSubmatch(body)
		if m == nil {
			break
		}
		if page > 5 {
			t.Fatal("more than 5 pages of 4 for at most 10 rows")
		}
		q = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if len(seen) != s.Parked() {
		t.Errorf("paging showed %d rows, want %d", len(seen), s.Parked())
	}
	if code, _ := c.get("action"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET action: %d, want 405", code)
	}
}

// checkFind: key k1's lane, its two eligible rows, and key p1's parked row.
func checkFind(t *testing.T, c *client, store outbox.Store) {
	lane := dashseed.Row("", "k1", nil, nil, time.Now(), store.Options().Lanes).Lane
	_, body := c.get("find?key=k1")
	if !strings.Contains(body, fmt.Sprintf(`<strong id="find-lane">%d</strong>`, lane)) {
		t.Errorf("find k1 does not name lane %d:\n%s", lane, body)
	}
	pending := body[strings.Index(body, `id="find-pending"`):strings.Index(body, `id="find-parked"`)]
	if n := strings.Count(pending, "<tr><td class=\"mono\">"); n != 2 {
		t.Errorf("find k1 lists %d eligible rows, want 2", n)
	}
	_, body = c.get("find?key=p1")
	parked := body[strings.Index(body, `id="find-parked"`):]
	if n := strings.Count(parked, `<a href="row?id=`); n != 1 {
		t.Errorf("find p1 lists %d parked rows, want 1", n)
	}
}

func checkHostile(t *testing.T, c *client, s dashseed.Seeded) {
	pages := []string{"parked", "parked?topic=" + url.QueryEscape(dashseed.Script), "find?key=" + url.QueryEscape(dashseed.HostileText("key"))}
	for _, r := range s.Hostile {
		pages = append(pages, "row?id="+r.ID.String())
	}
	for _, p := range pages {
		code, body := c.get(p)
		if code != 200 {
			t.Errorf("%s: status %d", p, code)
		}
		for _, raw := range []string{"<script>window", "<img", "onerror=\""} {
			if strings.Contains(body, raw) {
				t.Errorf("%s: page holds unescaped %q", p, raw)
			}
		}
		if len(body) > 512<<10 {
			t.Errorf("%s: page is %d bytes; want it bounded", p, len(body))
		}
	}
	_, body := c.get("row?id=" + s.Hostile[3].ID.String())
	if !strings.Contains(body, `<span id="meta-more">9,900</span>`) {
		t.Errorf("10,000 metadata entries: the page does not say 9,900 more")
	}
}

func csrf(t *testing.T, c *client, page string) string {
	t.Helper()
	_, body := c.get(page)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("%s has no CSRF field:\n%s", page, body)
	}
	return m[1]
}

func checkMutations(t *testing.T, c *client, store outbox.Store, s dashseed.Seeded) {
	origin := strings.TrimSuffix(c.base, "/outbox/")
	// Confirmation names the count; the action changes exactly those rows.
	_, body := c.get("confirm?op=requeue&topic=payments")
	if !strings.Contains(body, `<strong id="confirm-count">2</strong>`) {
		t.Fatalf("confirmation does not name 2 rows:\n%s", body)
	}
	tok := csrf(t, c, "confirm?op=requeue&topic=payments")
	form := url.Values{"op": {"requeue"}, "id": {s.ParkedPayments[0].String(), s.ParkedPayments[1].String()}}
	if code, _ := c.post(form, origin); code != 403 {
		t.Errorf("without a CSRF token: %d, want 403", code)
	}
	form.Set("csrf", "wrong"+tok[5:])
	if code, _ := c.post(form, origin); code != 403 {
		t.Errorf("with a wrong CSRF token: %d, want 403", code)
	}
	form.Set("csrf", tok)
	if code, _ := c.post(form, "https://evil.example"); code != 403 {
		t.Errorf("from another origin: %d, want 403", code)
	}
	code, body := c.post(form, origin)
	if code != 200 || !strings.Contains(body, `<strong id="result-count">2</strong>`) {
		t.Fatalf("requeue: %d\n%s", code, body)
	}
	form = url.Values{"op": {"purge"}, "csrf": {tok}, "id": {s.ParkedEmails[0].String()}}
	if code, body := c.post(form, origin); code != 200 || !strings.Contains(body, `<strong id="result-count">1</strong>`) {
		t.Fatalf("purge: %d\n%s", code, body)
	}
	st, err := store.Stats(context.Background(), time.Now())
	must(t, err)
	if want := int64(s.Parked() - 3); st.Parked != want {
		t.Errorf("parked after requeue 2 and purge 1: %d, want %d", st.Parked, want)
	}
}

// checkLogged: each mutation is logged with what it changed and who asked.
func checkLogged(t *testing.T, logs *watermill.CaptureLoggerAdapter, s dashseed.Seeded) {
	want := map[string]string{
		"dashboard: parked rows requeued": s.ParkedPayments[0].String() + "," + s.ParkedPayments[1].String(),
		"dashboard: parked rows purged":   s.ParkedEmails[0].String(),
	}
	for _, m := range logs.Captured()[watermill.InfoLogLevel] {
		ids, ok := want[m.Msg]
		if ok && m.Fields["ids"] == ids && m.Fields["changed"] == m.Fields["requested"] && m.Fields["actor"] == "alice" {
			delete(want, m.Msg)
		}
	}
	for msg, ids := range want {
		t.Errorf("no log %q naming %s, its counts and the actor", msg, ids)
	}
}

func checkReadOnly(t *testing.T, store outbox.Store, s dashseed.Seeded) {
	h, err := dashboard.New(store, dashboard.Config{}, nil)
	must(t, err)
	c := newClient(t, h)
	_, body := c.get("parked")
	if strings.Contains(body, "confirm?") || strings.Contains(body, "csrf") {
		t.Errorf("read-only parked page offers actions")
	}
	if code, _ := c.get("confirm?op=purge&topic=emails"); code != 403 {
		t.Errorf("read-only confirm: %d, want 403", code)
	}
	form := url.Values{"op": {"purge"}, "csrf": {"x"}, "id": {s.ParkedEmails[1].String()}}
	if code, _ := c.post(form, ""); code != 403 {
		t.Errorf("read-only purge: %d, want 403", code)
	}
}

// countingStore counts the Stats statements the dashboard runs.
type countingStore struct {
	outbox.Store
	stats atomic.Int64
}

func (c *countingStore) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	c.stats.Add(1)
	return c.Store.Stats(ctx, now)
}

// TestSnapshotShared: twenty viewers refreshing at once cost one Stats statement; a
// later request within a minute gets the last figures at once and starts one read.
func TestSnapshotShared(t *testing.T) {
	store, _ := dashseed.Open(t, dashseed.Services[1], "", false)
	cs := &countingStore{Store: store}
	h, err := dashboard.New(cs, dashboard.Config{SnapshotMaxAge: time.Hour}, nil)
	must(t, err)
	c := newClient(t, h)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { overviewJSON(t, c) })
	}
	wg.Wait()
	c.get("lanes")
	if n := cs.stats.Load(); n != 1 {
		t.Errorf("20 overviews and a lanes page ran Stats %d times, want 1", n)
	}
}

// failingStore fails Stats with an error that names a user and a host.
type failingStore struct{ outbox.Store }

var errStats = errors.New("connect to app_user@10.1.2.3:5432: password authentication failed")

func (failingStore) Stats(context.Context, time.Time) (outbox.Stats, error) {
	return outbox.Stats{}, errStats
}

// TestPartFails: a part that cannot be read is named on the page, its database error
// goes to the log only, and the other parts are still shown.
func TestPartFails(t *testing.T) {
	store, _ := dashseed.Open(t, dashseed.Services[1], "", false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(t, store.Heartbeat(ctx, "forwarder-b", time.Minute))
	logs := watermill.NewCaptureLogger()
	h, err := dashboard.New(failingStore{store}, dashboard.Config{}, logs)
	must(t, err)
	c := newClient(t, h)
	for _, page := range []string{"", "api/overview", "lanes"} {
		_, body := c.get(page)
		if !strings.Contains(body, "backlog statistics: failed") || strings.Contains(body, "app_user") || strings.Contains(body, "10.1.2.3") {
			t.Errorf("%s: want the part named without the database's error:\n%s", page, body)
		}
		if page != "lanes" && !strings.Contains(body, "forwarder-b") {
			t.Errorf("%s: the instances are not shown when the statistics fail", page)
		}
	}
	if !logs.HasError(errStats) {
		t.Errorf("the database error is not logged")
	}
}
