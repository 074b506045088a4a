package browsertest

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/dashboard"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/dashseed"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// chromium finds the browser: OUTBOX_CHROMIUM, else chromium on PATH. Without one the
// test skips, or fails when OUTBOX_TEST_REQUIRE names chromium (CI).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("OUTBOX_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testenv.Required("chromium") {
		t.Fatal("chromium is required (OUTBOX_TEST_REQUIRE) but none is on PATH: run scripts/chromium")
	}
	t.Skip("no chromium on PATH (scripts/chromium installs Debian's): skipping the browser tests")
	return ""
}

// browser starts a fresh headless Chromium (its own profile) for the test and counts the
// JavaScript dialogs any page opens (each is dismissed).
type browser struct {
	ctx     context.Context
	dialogs atomic.Int64
}

func newBrowser(t *testing.T) *browser {
	path := chromium(t)
	profile, err := os.MkdirTemp("", "outbox-dashboard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1200, 820),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			b.dialogs.Add(1)
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(false)) }()
		}
	})
	if err := chromedp.Run(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start %s: %v", path, err)
	}
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		_ = os.RemoveAll(profile) // best effort: the browser may still be flushing it
	})
	return b
}

// run runs actions with a deadline.
func (b *browser) run(t *testing.T, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	var s string
	b.run(t, chromedp.TextContent(sel, &s, chromedp.ByQuery))
	return s
}

func (b *browser) count(t *testing.T, sel string) int {
	t.Helper()
	var n int
	b.run(t, chromedp.Evaluate(`document.querySelectorAll(`+jsString(sel)+`).length`, &n))
	return n
}

// follow runs an action that loads a new page (a submit, a click on a link or a
// button) and waits until the new document has loaded and sel is visible.
func (b *browser) follow(t *testing.T, action chromedp.Action, sel string) {
	t.Helper()
	b.run(t, chromedp.Evaluate(`window.__oldDocument = 1`, nil), action)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var loaded bool
		b.run(t, chromedp.Evaluate(`window.__oldDocument === undefined && document.readyState === "complete"`, &loaded))
		if loaded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new page loaded within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.run(t, chromedp.WaitVisible(sel, chromedp.ByQuery))
}

// waitText waits until sel's text is want.
func (b *browser) waitText(t *testing.T, sel, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got string
	for time.Now().Before(deadline) {
		got = b.text(t, sel)
		if got == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s shows %q, want %q (after %s)", sel, got, want, within)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// inert checks that no dialog opened and no hostile script ran.
func (b *browser) inert(t *testing.T, where string) {
	t.Helper()
	var pwned bool
	b.run(t, chromedp.Evaluate(`window.__pwned !== undefined`, &pwned))
	if pwned || b.dialogs.Load() > 0 {
		t.Fatalf("%s: a hostile script ran (window.__pwned set: %v, dialogs: %d)", where, pwned, b.dialogs.Load())
	}
}

// site serves a dashboard with mutations at /outbox/ and a read-only one at /ro/.
func site(t *testing.T, store outbox.Store) string {
	// SnapshotMaxAge -1: every page reads the figures afresh, so that each check sees
	// the change it made (dashboard_test.TestSnapshotShared covers the sharing).
	rw, err := dashboard.New(store, dashboard.Config{AllowMutations: true, RefreshInterval: time.Second, StuckAfter: time.Hour,
		SnapshotMaxAge: -1, Title: "orders outbox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := dashboard.New(store, dashboard.Config{StuckAfter: time.Hour, Title: "orders outbox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", rw))
	mux.Handle("/ro/", http.StripPrefix("/ro", ro))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestBrowser(t *testing.T) {
	b := newBrowser(t)
	for _, service := range dashseed.Services {
		t.Run(service, func(t *testing.T) {
			store, _ := dashseed.Open(t, service, "", false)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s, err := dashseed.Standard(ctx, store)
			if err != nil {
				t.Fatal(err)
			}
			base := site(t, store)
			t.Run("overview", func(t *testing.T) { overview(t, b, base, store, s) })
			t.Run("lanes", func(t *testing.T) { lanesView(t, b, base, store) })
			t.Run("inbox", func(t *testing.T) { inboxView(t, b, base) })
			t.Run("filter", func(t *testing.T) { filter(t, b, base, s) })
			t.Run("hostile", func(t *testing.T) { hostile(t, b, base, store, s) })
			if dir := os.Getenv("OUTBOX_SCREENSHOTS"); dir != "" && service == testenv.Postgres {
				t.Run("screenshots", func(t *testing.T) { screenshots(t, b, base, s, dir) })
			}
			t.Run("mutations", func(t *testing.T) { mutations(t, b, base, store, s) })
			t.Run("readonly", func(t *testing.T) { readOnly(t, b, base, s) })
			b.inert(t, service)
		})
	}
}

func overview(t *testing.T, b *browser, base string, store outbox.Store, s dashseed.Seeded) {
	b.run(t, chromedp.Navigate(base+"/outbox/"), chromedp.WaitVisible("#ordered", chromedp.ByID))
	for sel, want := range map[string]string{"#ordered": "4", "#unordered": "3", "#waiting": "2", "#parked": itoa(s.Parked())} {
		if got := b.text(t, sel); got != want {
			t.Errorf("overview %s = %q, want %q", sel, got, want)
		}
	}
	// Live refresh: new rows and a forwarder show up without a reload.
	b.run(t, chromedp.Evaluate(`window.__sameDocument = 1`, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []outbox.Record
	for range 5 {
		recs = append(recs, dashseed.Row("orders", "", []byte("new"), nil, time.Now().UTC(), store.Options().Lanes))
	}
	if err := dashseed.Insert(ctx, store, recs); err != nil {
		t.Fatal(err)
	}
	if err := store.Heartbeat(ctx, "forwarder-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	b.waitText(t, "#unordered", "8", 15*time.Second)
	b.waitText(t, "#instances tbody tr td", "forwarder-a", 15*time.Second)
	var same int
	b.run(t, chromedp.Evaluate(`window.__sameDocument || 0`, &same))
	if same != 1 {
		t.Errorf("the overview reloaded instead of refreshing in place")
	}
}

func lanesView(t *testing.T, b *browser, base string, store outbox.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k1 := dashseed.Row("", "k1", nil, nil, time.Now(), store.Options().Lanes).Lane
	if ok, err := store.AcquireLease(ctx, outbox.LeaseParams{Lane: k1, Owner: "forwarder-a", Token: outbox.NewToken(), TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("acquire lease: %v %v", ok, err)
	}
	b.run(t, chromedp.Navigate(base+"/outbox/lanes"), chromedp.WaitVisible("#lanes", chromedp.ByID))
	// k1 (2 rows, leased), k2 and k3 (1 row each, no lease: stuck, listed first).
	if n := b.count(t, "#lanes tbody tr"); n != 3 {
		t.Errorf("lanes view lists %d lanes, want 3", n)
	}
	if n := b.count(t, "#lanes tbody tr.stuck"); n != 2 {
		t.Errorf("lanes view marks %d lanes stuck, want 2", n)
	}
	var firstStuck bool
	b.run(t, chromedp.Evaluate(`document.querySelector("#lanes tbody tr").classList.contains("stuck")`, &firstStuck))
	if !firstStuck {
		t.Errorf("stuck lanes are not listed first")
	}
	row := `#lanes tr[data-lane="` + itoa(k1) + `"]`
	if got := b.text(t, row+" td:nth-child(2)"); got != "forwarder-a" {
		t.Errorf("lane %d holder %q, want forwarder-a", k1, got)
	}
	if got := b.text(t, row+" td:nth-child(4)"); got != "2" {
		t.Errorf("lane %d backlog %q, want 2", k1, got)
	}
	// Sorting by backlog, descending, puts k1's lane first.
	b.follow(t, chromedp.Click(`#lanes th a[href*="sort=backlog"]`, chromedp.ByQuery), "#lanes")
	b.follow(t, chromedp.Click(`#lanes th a[href*="sort=backlog"]`, chromedp.ByQuery), "#lanes")
	var first string
	b.run(t, chromedp.Evaluate(`document.querySelector("#lanes tbody tr").dataset.lane`, &first))
	if first != itoa(k1) {
		t.Errorf("sorted by backlog descending, the first lane is %s, want %d", first, k1)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func inboxView(t *testing.T, b *browser, base string) {
	b.run(t, chromedp.Navigate(base+"/outbox/inbox"), chromedp.WaitVisible("#consumers", chromedp.ByID))
	if got := b.text(t, "#entries"); got != "3" {
		t.Errorf("inbox entries %q, want 3", got)
	}
	if got := b.text(t, "#duplicates"); got != "1" {
		t.Errorf("inbox duplicates %q, want 1", got)
	}
	if n := b.count(t, "#consumers tbody tr"); n != 2 {
		t.Errorf("inbox consumers %d, want 2", n)
	}
}

func filter(t *testing.T, b *browser, base string, s dashseed.Seeded) {
	b.run(t, chromedp.Navigate(base+"/outbox/parked"), chromedp.WaitVisible("#parked", chromedp.ByID))
	if n := b.count(t, "#parked tbody tr[data-id]"); n != s.Parked() {
		t.Errorf("parked list shows %d rows, want %d", n, s.Parked())
	}
	b.run(t, chromedp.SendKeys(`#filter input[name="topic"]`, "payments", chromedp.ByQuery))
	b.follow(t, chromedp.Submit(`#filter`, chromedp.ByQuery), "#parked")
	if n := b.count(t, "#parked tbody tr[data-id]"); n != 2 {
		t.Errorf("topic filter: %d rows, want 2", n)
	}
	b.run(t, chromedp.Navigate(base+"/outbox/parked"), chromedp.WaitVisible("#parked", chromedp.ByID),
		chromedp.SendKeys(`#filter input[name="error"]`, "smtp", chromedp.ByQuery))
	b.follow(t, chromedp.Submit(`#filter`, chromedp.ByQuery), "#parked")
	if n := b.count(t, "#parked tbody tr[data-id]"); n != 3 {
		t.Errorf("error filter: %d rows, want 3", n)
	}
}

// shownText is what the dashboard shows for stored text: invalid UTF-8 replaced.
func shownText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func hostile(t *testing.T, b *browser, base string, store outbox.Store, s dashseed.Seeded) {
	b.run(t, chromedp.Navigate(base+"/outbox/parked?error="+"onerror"), chromedp.WaitVisible("#parked", chromedp.ByID))
	b.inert(t, "parked list")
	if n := b.count(t, "#parked tbody tr[data-id]"); n != len(s.Hostile) {
		t.Errorf("hostile rows listed: %d, want %d", n, len(s.Hostile))
	}
	for _, r := range s.Hostile {
		st := stored(t, store, r.ID)
		row := `#parked tr[data-id="` + r.ID.String() + `"] `
		for sel, want := range map[string]string{"td.topic .t": st.Destination, "td.key .t": st.OrderingKey, "td.err .t": st.LastError} {
			if got := b.text(t, row+sel); got != shownText(want) {
				t.Errorf("parked list, row %s %s: DOM text %q, stored %q", r.ID, sel, got, want)
			}
		}
	}
	for _, r := range s.Hostile {
		b.run(t, chromedp.Navigate(base+"/outbox/row?id="+r.ID.String()), chromedp.WaitVisible("#fields", chromedp.ByID))
		b.inert(t, "row "+r.ID.String())
		st := stored(t, store, r.ID)
		for sel, want := range map[string]string{"#topic .t": st.Destination, "#key .t": st.OrderingKey, "#error .t": st.LastError,
			"#transport .t": st.Transport, "#type .t": st.MessageType, "#tenant .t": st.TenantID, "#uuid": st.MessageUUID} {
			if got := b.text(t, sel); got != shownText(want) {
				t.Errorf("row %s %s: DOM text %q, stored %q", r.ID, sel, got, want)
			}
		}
		checkPayload(t, b, st)
		checkMetadata(t, b, st)
	}
}

// stored reads a parked row back as the store keeps it (the text columns may have
// replaced what they cannot hold).
func stored(t *testing.T, store outbox.Store, id outbox.ID) outbox.Record {
	t.Helper()
	prev := id
	for i := len(prev) - 1; i >= 0; i-- { // id - 1
		prev[i]--
		if prev[i] != 0xff {
			break
		}
	}
	recs, err := store.ListParked(context.Background(), outbox.ParkedQuery{After: prev, Limit: 1})
	if err != nil || len(recs) != 1 || recs[0].ID != id {
		t.Fatalf("read back parked row %s: %v (%d rows)", id, err, len(recs))
	}
	return recs[0]
}

// checkPayload compares the preview with the stored payload: JSON indented, text, or a
// hex dump, each bounded by the default PreviewBytes.
func checkPayload(t *testing.T, b *browser, r outbox.Record) {
	got := b.text(t, "#payload")
	limit := dashboard.PreviewBytesDefault
	var want string
	var indented bytes.Buffer
	switch {
	case json.Valid(r.Body) && json.Indent(&indented, r.Body, "", "  ") == nil:
		want = shownText(indented.String())
	case utf8.Valid(r.Body[:min(len(r.Body), limit)]):
		want = string(r.Body[:min(len(r.Body), limit)])
	default:
		want = hex.Dump(r.Body[:min(len(r.Body), limit/4)])
	}
	if got != want {
		t.Errorf("row %s payload preview (%d bytes shown) differs from the stored payload's start", r.ID, len(got))
	}
	if len(got) > 4*limit {
		t.Errorf("row %s payload preview is %d bytes: unbounded", r.ID, len(got))
	}
}

func checkMetadata(t *testing.T, b *browser, r outbox.Record) {
	hs, err := headercodec.Decode(r.Headers, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cells []string
	b.run(t, chromedp.Evaluate(`Array.from(document.querySelectorAll("#metadata tbody tr")).map(tr => tr.cells[0].textContent + "=" + tr.cells[1].textContent)`, &cells))
	shown := min(len(hs), dashboard.MetadataEntriesDefault)
	if len(cells) != shown {
		t.Fatalf("row %s: %d metadata rows shown, want %d", r.ID, len(cells), shown)
	}
	want := map[string]bool{}
	for _, h := range hs {
		v := string(h.Value)
		if !utf8.Valid(h.Value) {
			v = "hex " + hex.EncodeToString(h.Value)
		}
		want[h.Name+"="+v] = true
	}
	for _, c := range cells {
		if !want[c] {
			t.Errorf("row %s: metadata row %q is not a stored entry", r.ID, c)
		}
	}
	if len(hs) > shown {
		if got := b.text(t, "#meta-more"); got != "9,900" {
			t.Errorf("row %s: %q more entries named, want 9,900", r.ID, got)
		}
	}
}

func parkedCount(t *testing.T, store outbox.Store) int64 {
	t.Helper()
	st, err := store.Stats(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st.Parked
}

func mutations(t *testing.T, b *browser, base string, store outbox.Store, s dashseed.Seeded) {
	before := parkedCount(t, store)
	// A missing CSRF token is refused and changes nothing.
	b.run(t, chromedp.Navigate(base+"/outbox/confirm?op=purge&id="+s.ParkedEmails[0].String()), chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Evaluate(`document.querySelector('#confirm input[name="csrf"]').remove()`, nil))
	b.follow(t, chromedp.Click("#confirm-button", chromedp.ByID), "#error-text")
	if got := b.text(t, "#error-text"); !strings.Contains(got, "CSRF") {
		t.Errorf("purge without a CSRF token: %q", got)
	}
	if n := parkedCount(t, store); n != before {
		t.Fatalf("a refused purge changed the parked count: %d -> %d", before, n)
	}
	// Requeue all matching topic=payments: the confirmation names 2; the page and the
	// database change.
	b.run(t, chromedp.Navigate(base+"/outbox/parked?topic=payments"), chromedp.WaitVisible("#requeue-all", chromedp.ByID))
	b.follow(t, chromedp.Click("#requeue-all", chromedp.ByID), "#confirm")
	if got := b.text(t, "#confirm-count"); got != "2" {
		t.Errorf("requeue confirmation names %q rows, want 2", got)
	}
	b.follow(t, chromedp.Click("#confirm-button", chromedp.ByID), "#result")
	if got := b.text(t, "#result-count"); got != "2" {
		t.Errorf("requeue result %q, want 2", got)
	}
	if n := parkedCount(t, store); n != before-2 {
		t.Errorf("parked after requeue: %d, want %d", n, before-2)
	}
	b.follow(t, chromedp.Click("#back", chromedp.ByID), "#parked")
	if n := b.count(t, "#parked tbody tr[data-id]"); n != 0 {
		t.Errorf("payments still listed after requeue: %d", n)
	}
	// Purge one row from its own view.
	b.run(t, chromedp.Navigate(base+"/outbox/row?id="+s.ParkedEmails[0].String()), chromedp.WaitVisible("#purge", chromedp.ByID))
	b.follow(t, chromedp.Click("#purge", chromedp.ByID), "#confirm")
	if got := b.text(t, "#confirm-count"); got != "1" {
		t.Errorf("purge confirmation names %q rows, want 1", got)
	}
	b.follow(t, chromedp.Click("#confirm-button", chromedp.ByID), "#result")
	if n := parkedCount(t, store); n != before-3 {
		t.Errorf("parked after purge: %d, want %d", n, before-3)
	}
	b.run(t, chromedp.Navigate(base+"/outbox/row?id="+s.ParkedEmails[0].String()), chromedp.WaitVisible("#error-text", chromedp.ByID))
}

func readOnly(t *testing.T, b *browser, base string, s dashseed.Seeded) {
	b.run(t, chromedp.Navigate(base+"/ro/parked"), chromedp.WaitVisible("#parked", chromedp.ByID))
	if n := b.count(t, "#requeue-all, #purge-all, td.acts"); n != 0 {
		t.Errorf("read-only dashboard shows %d action controls", n)
	}
	if got := b.text(t, "#mode"); got != "read-only" {
		t.Errorf("mode %q", got)
	}
	var status int
	b.run(t, chromedp.Evaluate(`fetch("action", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
		body: "op=purge&csrf=x&id=`+s.ParkedEmails[1].String()+`"}).then(r => r.status)`, &status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	}))
	if status != http.StatusForbidden {
		t.Errorf("POST to a read-only dashboard: %d, want 403", status)
	}
}

func screenshots(t *testing.T, b *browser, base string, s dashseed.Seeded, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shots := map[string]string{
		"dashboard-overview.png": base + "/outbox/",
		"dashboard-lanes.png":    base + "/outbox/lanes",
		"dashboard-parked.png":   base + "/outbox/parked",
		"dashboard-row.png":      base + "/outbox/row?id=" + s.ParkedPayments[0].String(),
	}
	for name, u := range shots {
		var png []byte
		b.run(t, chromedp.EmulateViewport(1100, 640), chromedp.Navigate(u), chromedp.WaitVisible("main", chromedp.ByQuery),
			chromedp.Sleep(300*time.Millisecond), chromedp.CaptureScreenshot(&png))
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
