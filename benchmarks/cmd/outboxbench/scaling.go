package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relayer-go/watermill-outbox/forwarder"
)

// scalingSection: the same ordered backlog drained by 1, 2 and 4 forwarders (in this
// process, distinct owners) sharing one table's 64 lanes through leases; timed from
// their start (lease acquisition and rebalancing included) until the table is empty.
func scalingSection(ctx context.Context, e *engine, cfg config, sec *section) error {
	partial := 0
	for run := 0; run < cfg.runs; run++ {
		rate := map[int]float64{}
		for _, k := range []int{1, 2, 4} {
			r, err := drainOurs(ctx, e, cfg.scaleRows, 1000, forwarder.Config{}, k, 10*time.Minute)
			if errors.Is(err, errDeadline) {
				partial++
			} else if err != nil {
				return fmt.Errorf("%d instances: %w", k, err)
			}
			rate[k] = r
			sec.add(fmt.Sprintf("instances%d_msgs_per_s", k), fmt.Sprintf("%d forwarder(s)", k), "msgs/s", r)
		}
		sec.add("ratio_2_1", "2 / 1 instances", "ratio", rate[2]/rate[1])
		sec.add("ratio_4_1", "4 / 1 instances", "ratio", rate[4]/rate[1])
	}
	sec.note("Default Config (LeaseTTL %s: a joining forwarder gets its share at the holders' next renewal, LeaseTTL/3). "+
		"All instances run in one process on this machine's cores, as do the database and the harness.", forwarder.LeaseTTLDefault)
	if partial > 0 {
		sec.note("%d drain(s) hit the time limit.", partial)
	}
	return nil
}
