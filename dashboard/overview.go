package dashboard

import (
	"context"
	"errors"
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
	ReadSeconds  float64    `json:"read_seconds"` // how long reading these figures took
}

// instance is one forwarder process as the members and lease tables show it.
type instance struct {
	Owner      string    `json:"owner"`
	Member     bool      `json:"member"`      // its heartbeat is live
	LiveLanes  int       `json:"live_lanes"`  // lanes it holds a live lease on
	LeaseUntil time.Time `json:"lease_until"` // latest expiry among its live leases
}

// collectOverview builds the overview from a snapshot. A failed part is named in
// Problems and the others are still shown.
func (h *Handler) collectOverview(ctx context.Context) overview {
	ov := overview{Now: h.now().UTC(), Instances: []instance{}, Problems: []string{}}
	snap, err := h.snapshot(ctx)
	if err != nil {
		ov.Problems = append(ov.Problems, h.problem("backlog figures", err))
		return ov
	}
	ov.Now, ov.ReadSeconds = snap.At, snap.Took.Seconds()
	if snap.StatsErr != nil {
		ov.Problems = append(ov.Problems, h.problem("backlog statistics", snap.StatsErr))
	}
	for _, l := range snap.Stats.Lanes {
		if l.Lane == outbox.Unordered {
			ov.Unordered += l.Eligible
		} else {
			ov.Ordered += l.Eligible
		}
		if !l.OldestEligible.IsZero() && l.Eligible > 0 {
			ov.OldestAgeSec = max(ov.OldestAgeSec, snap.At.Sub(l.OldestEligible).Seconds())
		}
	}
	ov.Parked = snap.Stats.Parked
	if snap.PendingErr != nil {
		ov.Problems = append(ov.Problems, h.problem("pending count", snap.PendingErr))
	} else {
		ov.Pending = snap.Pending
		ov.Waiting = max(0, snap.Pending-ov.Ordered-ov.Unordered)
		ov.Rate = snap.Rate
	}
	if err := errors.Join(snap.MembersErr, snap.LeasesErr); err != nil {
		ov.Problems = append(ov.Problems, h.problem("forwarder instances", err))
	} else {
		ov.Instances = h.instances(snap.Members, snap.Leases)
	}
	return ov
}

// instances joins the live members with the lease holders.
func (h *Handler) instances(members []string, leases []outbox.Lease) []instance {
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
	return out
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
