package dashboard

import (
	"context"
	"net/http"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/lanes"
)

// findLimit bounds each read of the finder.
const findLimit = 50

type findView struct {
	Key        shown
	Asked      bool
	Lane       int
	Holder     string
	LeaseUntil time.Time
	Head       *parkedRow // the lane's head row, whatever its key
	HeadHeld   bool       // the head is not due or under a claim: it holds the lane
	Pending    []parkedRow
	PendingMax int
	Parked     []parkedRow
	ParkedMore bool
}

// findPage locates the rows of one ordering key with bounded, indexed reads: its lane
// (lanes.Of), the lane's lease, the lane's head (Store.Head), the key's rows among the
// first findLimit eligible rows of the lane (Store.Read) and its parked rows
// (Store.ListParked by key).
func (h *Handler) findPage(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	v := findView{Key: h.show(key), Asked: key != "", PendingMax: findLimit}
	if key == "" {
		h.render(w, r, http.StatusOK, "find", v, nil)
		return
	}
	ctx, cancel := h.queryContext(r)
	defer cancel()
	v.Lane = lanes.Of(key, h.store.Options().Lanes)
	problems := h.findLane(ctx, &v, key)
	recs, err := h.store.ListParked(ctx, outbox.ParkedQuery{Limit: findLimit + 1, OrderingKey: &key})
	if err != nil {
		problems = append(problems, h.problem("parked rows of the key", err))
	}
	now := h.now().UTC()
	for i := range recs[:min(len(recs), findLimit)] {
		v.Parked = append(v.Parked, h.parkedRow(&recs[i], now))
	}
	v.ParkedMore = len(recs) > findLimit
	h.render(w, r, http.StatusOK, "find", v, problems)
}

func (h *Handler) findLane(ctx context.Context, v *findView, key string) []string {
	var problems []string
	now := h.now().UTC()
	if leases, err := h.store.Leases(ctx); err != nil {
		problems = append(problems, h.problem("lane leases", err))
	} else {
		for _, l := range leases {
			if l.Lane == v.Lane && l.Live {
				v.Holder, _ = clip(l.Owner, h.config.FieldBytes)
				v.LeaseUntil = l.ExpiresAt
			}
		}
	}
	head, err := h.store.Head(ctx, outbox.HeadQuery{Lane: v.Lane, Limit: 1, Now: now}, nil)
	if err != nil {
		problems = append(problems, h.problem("lane head", err))
	} else if len(head) == 1 {
		row := h.parkedRow(&head[0], now)
		v.Head = &row
	}
	rows, err := h.store.Read(ctx, outbox.ReadQuery{Lane: v.Lane, Now: now}, make([]outbox.Record, findLimit))
	if err != nil {
		return append(problems, h.problem("eligible rows of the lane", err))
	}
	if v.Head == nil && len(rows) > 0 {
		v.HeadHeld = true // eligible rows, but Head stopped at the first: it holds the lane
	}
	for i := range rows {
		if rows[i].OrderingKey == key {
			v.Pending = append(v.Pending, h.parkedRow(&rows[i], now))
		}
	}
	return problems
}
