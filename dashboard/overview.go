package dashboard

import (
	"context"
	"net/http"
	"sort"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// farFuture is the instant at which every pending row counts as eligible (due, and any
// claim expired): Count at farFuture is the whole pending backlog.
var farFuture = time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC)

// overview is the overview page's figures; the JSON endpoint serves the same.
type overview struct {
	Now          time.Time  `json:"now"`
	Ordered      int64      `json:"ordered"`   // eligible rows in lanes
	Unordered    int64      `json:"unordered"` // eligible unordered rows
	Waiting      int64      `json:"waiting"`   // pending, not eligible: scheduled or under a live claim
	Pending      int64      `json:"pending"`   // every pending row
	OldestAgeSec float64    `json:"oldest_age_seconds"`
	Parked       int64      `json:"parked"`
	Rate         rate       `json:"rate"`
	Instances    []instance `json:"instances"`
	Problems     []string   `json:"problems"`
}

// instance is one forwarder process as the members and lease tables show it.
type instance struct {
	Owner      string    `json:"owner"`
	Member     bool      `json:"member"`      // its heartbeat is live
	LiveLanes  int       `json:"live_lanes"`  // lanes it holds a live lease on
	LeaseUntil time.Time `json:"lease_until"` // latest expiry among its live leases
}

// collectOverview reads the figures: Stats (the store's bounded backlog statement),
// Count at farFuture, Members and Leases. A failed part is named in Problems and the
// others are still shown.
func (h *Handler) collectOverview(ctx context.Context) overview {
	now := h.now().UTC()
	ov := overview{Now: now, Instances: []instance{}, Problems: []string{}}
	st, err := h.store.Stats(ctx, now)
	if err != nil {
		ov.Problems = append(ov.Problems, h.problem("backlog statistics", err))
	}
	for _, l := range st.Lanes {
		if l.Lane == outbox.Unordered {
			ov.Unordered += l.Eligible
		} else {
			ov.Ordered += l.Eligible
		}
		if !l.OldestEligible.IsZero() && l.Eligible > 0 {
			ov.OldestAgeSec = max(ov.OldestAgeSec, now.Sub(l.OldestEligible).Seconds())
		}
	}
	ov.Parked = st.Parked
	if pending, err := h.store.Count(ctx, farFuture); err != nil {
		ov.Problems = append(ov.Problems, h.problem("pending count", err))
	} else {
		ov.Pending = pending
		ov.Waiting = max(0, pending-ov.Ordered-ov.Unordered)
		ov.Rate = h.sample(now, pending)
	}
	ov.Instances, err = h.instances(ctx)
	if err != nil {
		ov.Problems = append(ov.Problems, h.problem("forwarder instances", err))
	}
	return ov
}

// instances joins the live members with the lease holders.
func (h *Handler) instances(ctx context.Context) ([]instance, error) {
	members, err := h.store.Members(ctx)
	if err != nil {
		return []instance{}, err
	}
	leases, err := h.store.Leases(ctx)
	if err != nil {
		return []instance{}, err
	}
	by := map[string]*instance{}
	get := func(owner string) *instance {
		if by[owner] == nil {
			by[owner] = &instance{Owner: owner}
		}
		return by[owner]
	}
	for _, m := range members {
		get(m).Member = true
	}
	for _, l := range leases {
		if !l.Live {
			continue
		}
		in := get(l.Owner)
		in.LiveLanes++
		if l.ExpiresAt.After(in.LeaseUntil) {
			in.LeaseUntil = l.ExpiresAt.UTC()
		}
	}
	out := make([]instance, 0, len(by))
	for _, in := range by {
		in.Owner, _ = clip(in.Owner, h.config.FieldBytes)
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Owner < out[j].Owner })
	return out, nil
}

type overviewView struct {
	overview
	RateWindow time.Duration
}

func (h *Handler) overviewPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryContext(r)
	defer cancel()
	ov := h.collectOverview(ctx)
	h.render(w, r, http.StatusOK, "overview", overviewView{ov, h.config.RateWindow}, ov.Problems)
}

func (h *Handler) overviewJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryContext(r)
	defer cancel()
	writeJSON(w, h.collectOverview(ctx))
}

// OldestAge is the wait of the oldest eligible row.
func (o overview) OldestAge() time.Duration {
	return time.Duration(o.OldestAgeSec * float64(time.Second))
}
