package dashboard

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

//go:embed assets
var assets embed.FS

// Handler is the dashboard: an http.Handler serving the pages of one outbox store. Mount
// it behind the application's own authentication, for example
//
//	mux.Handle("/outbox/", auth(http.StripPrefix("/outbox", h)))
//
// Every link it renders is relative, so it works under any prefix. It is safe for
// concurrent use.
type Handler struct {
	store  outbox.Store
	config Config
	logger watermill.LoggerAdapter
	mux    *http.ServeMux
	pages  map[string]*template.Template
	origin *http.CrossOriginProtection
	now    func() time.Time

	snaps   snapshots
	mu      sync.Mutex
	samples []sample // backlog samples behind the overview's rate (see rate.go)
}

// New returns a dashboard over store. config is taken by value; its zero fields take
// their defaults. A nil logger logs nothing.
func New(store outbox.Store, config Config, logger watermill.LoggerAdapter) (*Handler, error) {
	if store == nil {
		return nil, ErrNoStore
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	origin := http.NewCrossOriginProtection()
	for _, o := range config.TrustedOrigins {
		if err := origin.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("%w: Config.TrustedOrigins: %w", ErrInvalidConfig, err)
		}
	}
	h := &Handler{store: store, config: config, logger: logger, pages: pages, origin: origin, now: time.Now}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets/static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", h.overviewPage)
	m.HandleFunc("GET /api/overview", h.overviewJSON)
	m.HandleFunc("GET /lanes", h.lanesPage)
	m.HandleFunc("GET /parked", h.parkedPage)
	m.HandleFunc("GET /row", h.rowPage)
	m.HandleFunc("GET /inbox", h.inboxPage)
	m.HandleFunc("GET /find", h.findPage)
	m.HandleFunc("GET /confirm", h.confirmPage)
	m.HandleFunc("POST /action", h.action)
	m.HandleFunc("/action", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, r, http.StatusMethodNotAllowed, "mutations are POST only")
	})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "no such page")
	})
	h.mux = m
}

// ServeHTTP serves the dashboard's pages, its JSON endpoint and its embedded assets.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if r.URL.Path == "" { // mounted with StripPrefix at "/prefix": relative links need the slash
		http.Redirect(w, r, mountPath(r)+"/", http.StatusMovedPermanently)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// mountPath is the request's path as the client sent it, without the query.
func mountPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" || p[0] != '/' {
		p = "/" + strings.TrimLeft(p, "/")
	}
	return p
}

// queryContext bounds the database work of one request.
func (h *Handler) queryContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.config.QueryTimeout)
}

// page is what every template gets: the common frame and the view's own data.
type page struct {
	Title     string
	Nav       string
	Mutations bool
	CSRF      string
	Now       time.Time
	Refresh   int64 // milliseconds, for the live overview
	Problems  []string
	View      any
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, nav string, view any, problems []string) {
	p := page{Title: h.config.Title, Nav: nav, Mutations: h.config.AllowMutations, Now: h.now().UTC(),
		Refresh: h.config.RefreshInterval.Milliseconds(), Problems: problems, View: view}
	if h.config.AllowMutations {
		p.CSRF = h.csrfToken(w, r)
	}
	var buf bytes.Buffer
	if err := h.pages[nav].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.logger.Error("dashboard: render", err, watermill.LogFields{"page": nav})
		http.Error(w, "dashboard: the page could not be rendered (see the application log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page whose message is the dashboard's own text (never a
// database error, which the log gets).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", msg, nil)
}

// problem logs err and returns the text a page shows for it: what could not be read,
// without the database's message (which may name hosts or users).
func (h *Handler) problem(what string, err error) string {
	h.logger.Error("dashboard: "+what, err, nil)
	if errors.Is(err, context.DeadlineExceeded) {
		return what + ": timed out after " + h.config.QueryTimeout.String()
	}
	return what + ": failed (the application log has the error)"
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}
