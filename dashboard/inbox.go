package dashboard

import (
	"net/http"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

type inboxRow struct {
	Consumer   shown
	Entries    int64
	Duplicates int64
	Oldest     time.Time
	OldestAge  time.Duration
}

type inboxView struct {
	Supported  bool // the store implements outbox.Inbox
	Consumers  []inboxRow
	Entries    int64
	Duplicates int64
	OldestAge  time.Duration
}

// inboxPage shows Inbox.InboxStats: entries, oldest entry and skipped duplicates per
// consumer.
func (h *Handler) inboxPage(w http.ResponseWriter, r *http.Request) {
	in, ok := h.store.(outbox.Inbox)
	v := inboxView{Supported: ok}
	if !ok {
		h.render(w, r, http.StatusOK, "inbox", v, nil)
		return
	}
	ctx, cancel := h.queryContext(r)
	defer cancel()
	st, err := in.InboxStats(ctx)
	if err != nil {
		h.render(w, r, http.StatusOK, "inbox", v, []string{h.problem("inbox statistics (is the inbox table created?)", err)})
		return
	}
	now := h.now().UTC()
	v.Entries, v.Duplicates = st.Entries(), st.Duplicates()
	for _, c := range st.Consumers {
		a := max(0, now.Sub(c.Oldest))
		v.Consumers = append(v.Consumers, inboxRow{Consumer: h.show(c.Consumer), Entries: c.Entries,
			Duplicates: c.Duplicates, Oldest: c.Oldest, OldestAge: a})
		v.OldestAge = max(v.OldestAge, a)
	}
	h.render(w, r, http.StatusOK, "inbox", v, nil)
}
