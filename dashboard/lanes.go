package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneRow is one lane of the lanes view.
type laneRow struct {
	Lane       int
	Holder     string // owner of its live lease; "" when none
	LeaseUntil time.Time
	Expired    string // owner of an expired lease row
	Eligible   int64
	HeadAge    time.Duration // age of its oldest eligible row
	Pending    bool          // holds pending rows (eligible or not)
	Stuck      bool
	Why        string
}

type lanesView struct {
	Lanes      []laneRow
	Sort, Dir  string
	StuckCount int
	StuckAfter time.Duration
	At         time.Time // when the figures were read
}

// laneSorts are the lanes view's sort keys; "stuck" (the default) puts stuck lanes first,
// oldest head first.
var laneSorts = map[string]func(a, b laneRow) int{
	"stuck": func(a, b laneRow) int {
		if a.Stuck != b.Stuck {
			if a.Stuck {
				return -1
			}
			return 1
		}
		return cmp.Or(-cmp.Compare(a.HeadAge, b.HeadAge), cmp.Compare(a.Lane, b.Lane))
	},
	"lane": func(a, b laneRow) int { return cmp.Compare(a.Lane, b.Lane) },
	"backlog": func(a, b laneRow) int {
		return cmp.Or(cmp.Compare(a.Eligible, b.Eligible), cmp.Compare(a.Lane, b.Lane))
	},
	"age":    func(a, b laneRow) int { return cmp.Or(cmp.Compare(a.HeadAge, b.HeadAge), cmp.Compare(a.Lane, b.Lane)) },
	"holder": func(a, b laneRow) int { return cmp.Or(cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Lane, b.Lane)) },
	"expiry": func(a, b laneRow) int { return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), cmp.Compare(a.Lane, b.Lane)) },
}

// collectLanes joins, from a snapshot, Stats (eligible count and oldest row per lane),
// PendingLanes (lanes with any pending row) and Leases; every lane that appears in one
// of them is listed.
func (h *Handler) collectLanes(ctx context.Context) ([]laneRow, time.Time, []string) {
	snap, err := h.snapshot(ctx)
	if err != nil {
		return nil, time.Time{}, []string{h.problem("backlog figures", err)}
	}
	by := map[int]*laneRow{}
	get := func(lane int) *laneRow {
		if by[lane] == nil {
			by[lane] = &laneRow{Lane: lane}
		}
		return by[lane]
	}
	var problems []string
	for _, p := range []struct {
		what string
		err  error
	}{{"backlog statistics", snap.StatsErr}, {"pending lanes", snap.LanesErr}, {"lane leases", snap.LeasesErr}} {
		if p.err != nil {
			problems = append(problems, h.problem(p.what, p.err))
		}
	}
	for _, l := range snap.Stats.Lanes {
		if l.Lane == outbox.Unordered {
			continue
		}
		lr := get(l.Lane)
		lr.Eligible, lr.Pending = l.Eligible, true
		if l.Eligible > 0 && !l.OldestEligible.IsZero() {
			lr.HeadAge = max(0, snap.At.Sub(l.OldestEligible))
		}
	}
	for _, lane := range snap.Lanes {
		get(lane).Pending = true
	}
	for _, l := range snap.Leases {
		lr := get(l.Lane)
		owner, _ := clip(l.Owner, h.config.FieldBytes)
		lr.LeaseUntil = l.ExpiresAt.UTC()
		if l.Live {
			lr.Holder = owner
		} else {
			lr.Expired = owner
		}
	}
	out := make([]laneRow, 0, len(by))
	for _, lr := range by {
		h.judge(lr)
		out = append(out, *lr)
	}
	return out, snap.At, problems
}

// judge marks a lane stuck: eligible rows and no live lease, or a head older than
// StuckAfter.
func (h *Handler) judge(lr *laneRow) {
	switch {
	case lr.Eligible > 0 && lr.Holder == "":
		lr.Stuck, lr.Why = true, "eligible rows, no live lease"
	case lr.Eligible > 0 && lr.HeadAge > h.config.StuckAfter:
		lr.Stuck, lr.Why = true, "head waiting longer than "+h.config.StuckAfter.String()
	}
}

func (h *Handler) lanesPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.queryContext(r)
	defer cancel()
	rows, at, problems := h.collectLanes(ctx)
	v := lanesView{Lanes: rows, At: at, Sort: r.URL.Query().Get("sort"), Dir: r.URL.Query().Get("dir"), StuckAfter: h.config.StuckAfter}
	less, ok := laneSorts[v.Sort]
	if !ok {
		v.Sort, less = "stuck", laneSorts["stuck"]
	}
	if v.Dir != "desc" {
		v.Dir = "asc"
	}
	slices.SortStableFunc(v.Lanes, func(a, b laneRow) int {
		if v.Dir == "desc" {
			return less(b, a)
		}
		return less(a, b)
	})
	for _, l := range v.Lanes {
		if l.Stuck {
			v.StuckCount++
		}
	}
	h.render(w, r, http.StatusOK, "lanes", v, problems)
}
