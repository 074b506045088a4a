package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// csrfCookie holds the double-submit token: every mutation form carries the same value
// in its csrf field. The cookie is HttpOnly and SameSite=Strict; the origin check
// (net/http's CrossOriginProtection: Sec-Fetch-Site, else Origin against Host) comes
// on top.
const csrfCookie = "outbox_dashboard_csrf"

// maxFormBytes bounds a mutation's request body (MaxActionRowsMax ids fit).
const maxFormBytes = 1 << 20

// csrfToken returns the request's token, setting a fresh cookie when it has none.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 43 {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

// checkMutation refuses a mutation that is not allowed, not from this origin or
// without the request's CSRF token; it writes the refusal and returns false.
func (h *Handler) checkMutation(w http.ResponseWriter, r *http.Request) bool {
	if !h.config.AllowMutations {
		h.fail(w, r, http.StatusForbidden, "this dashboard is read-only (Config.AllowMutations is off)")
		return false
	}
	if err := h.origin.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "refused: the request does not come from this dashboard's origin")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "the form cannot be read")
		return false
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostForm.Get("csrf"))) != 1 {
		h.fail(w, r, http.StatusForbidden, "refused: missing or wrong CSRF token (reload the page and try again)")
		return false
	}
	return true
}

type confirmView struct {
	Op       string // "requeue" or "purge"
	IDs      []string
	Filter   filter
	Describe string
	More     bool // more rows match than this action covers
	Scanned  int
}

// confirmPage names the rows an action will change: one row (id), or the rows matching
// a filter, found by a bounded scan (at most MaxActionRows rows change).
func (h *Handler) confirmPage(w http.ResponseWriter, r *http.Request) {
	if !h.config.AllowMutations {
		h.fail(w, r, http.StatusForbidden, "this dashboard is read-only (Config.AllowMutations is off)")
		return
	}
	q := r.URL.Query()
	v := confirmView{Op: q.Get("op")}
	if v.Op != "requeue" && v.Op != "purge" {
		h.fail(w, r, http.StatusBadRequest, "op: want requeue or purge")
		return
	}
	f, err := parseFilter(q)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	v.Filter = f
	ctx, cancel := h.queryContext(r)
	defer cancel()
	if id := q.Get("id"); id != "" {
		parsed, err := outbox.ParseID(id)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, "id: not a row id")
			return
		}
		v.Describe = "row " + parsed.String()
		if rec, err := h.parkedByID(ctx, parsed); err != nil {
			h.render(w, r, http.StatusOK, "error", "", []string{h.problem("parked row", err)})
			return
		} else if rec != nil {
			v.IDs = []string{parsed.String()}
		}
		h.render(w, r, http.StatusOK, "confirm", v, nil)
		return
	}
	res, err := h.scan(ctx, f, h.config.MaxActionRows, max(h.config.ScanLimit, h.config.MaxActionRows))
	if err != nil {
		h.render(w, r, http.StatusOK, "error", "", []string{h.problem("parked rows", err)})
		return
	}
	for i := range res.Rows {
		v.IDs = append(v.IDs, res.Rows[i].ID.String())
	}
	v.Describe, v.More, v.Scanned = f.Describe(), res.More, res.Scanned
	h.render(w, r, http.StatusOK, "confirm", v, nil)
}

type resultView struct {
	Op        string
	Requested int
	Changed   int
	Describe  string
	Filter    template.URL // query of the parked list to go back to (encoded here)
}

// action runs a confirmed requeue or purge of the listed ids and logs what it changed.
func (h *Handler) action(w http.ResponseWriter, r *http.Request) {
	if !h.checkMutation(w, r) {
		return
	}
	op := r.PostForm.Get("op")
	ids, err := parseIDs(r.PostForm["id"], h.config.MaxActionRows)
	if err == nil && op != "requeue" && op != "purge" {
		err = fmt.Errorf("op: want requeue or purge")
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.queryContext(r)
	defer cancel()
	sel := outbox.ParkedFilter{IDs: ids}
	var n int
	if op == "requeue" {
		n, err = h.store.Requeue(ctx, sel)
	} else {
		n, err = h.store.Purge(ctx, sel)
	}
	describe, _ := clip(r.PostForm.Get("describe"), 1024)
	fields := watermill.LogFields{"op": op, "requested": len(ids), "changed": n, "selection": describe,
		"ids": idList(ids, 20), "remote_addr": r.RemoteAddr}
	if h.config.Actor != nil {
		fields["actor"] = h.config.Actor(r)
	}
	if err != nil {
		h.logger.Error("dashboard: parked rows "+op+" failed", err, fields)
		h.render(w, r, http.StatusOK, "error", "", []string{h.problem(op, err)})
		return
	}
	h.logger.Info("dashboard: parked rows "+op+"d", fields)
	back, _ := url.ParseQuery(r.PostForm.Get("back"))
	bf, _ := parseFilter(back) // only its known fields, re-encoded
	h.render(w, r, http.StatusOK, "result", resultView{Op: op, Requested: len(ids), Changed: n, Describe: describe,
		Filter: template.URL(bf.Query().Encode())}, nil)
}

func parseIDs(raw []string, limit int) ([]outbox.ID, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("no rows selected")
	}
	if len(raw) > limit {
		return nil, fmt.Errorf("%d rows selected; at most %d per action", len(raw), limit)
	}
	ids := make([]outbox.ID, 0, len(raw))
	for _, s := range raw {
		id, err := outbox.ParseID(s)
		if err != nil {
			return nil, fmt.Errorf("id: not a row id")
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// idList names at most n ids for the log, and how many more there are.
func idList(ids []outbox.ID, n int) string {
	s := make([]string, 0, min(n, len(ids)))
	for _, id := range ids[:min(n, len(ids))] {
		s = append(s, id.String())
	}
	out := strings.Join(s, ",")
	if len(ids) > n {
		out += fmt.Sprintf(" (+%d more)", len(ids)-n)
	}
	return out
}
