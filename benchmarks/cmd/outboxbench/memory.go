package main

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// memorySection: the parent fills the table; a child process of this binary that does
// nothing but drain it (default Config, no-op publisher) reports its peak RSS (VmHWM)
// and allocations per message. The drain stops at cfg.memoryLimit (a 1,000,000-row
// backlog drains for many minutes on a loaded MariaDB): the backlog is there all along,
// which is what memory has to stay flat against.
func memorySection(ctx context.Context, e *engine, cfg config, sec *section) error {
	for run := 0; run < cfg.memoryRuns; run++ {
		t, err := e.newOutboxTable(ctx)
		if err != nil {
			return err
		}
		rep, err := func() (memoryReport, error) {
			defer t.drop()
			if err := fillOutbox(ctx, t, cfg.memoryRows, 0, destination); err != nil {
				return memoryReport{}, err
			}
			child, err := startChild(ctx, roleMemory, e, t.opts.TablePrefix, cfg.memoryRows, cfg.memoryLimit)
			if err != nil {
				return memoryReport{}, err
			}
			defer child.stop()
			line, err := child.waitLine("MEMORY ", 30*time.Minute)
			if err != nil {
				return memoryReport{}, err
			}
			var rep memoryReport
			err = json.Unmarshal([]byte(strings.TrimPrefix(line, "MEMORY ")), &rep)
			return rep, err
		}()
		if err != nil {
			return err
		}
		const mib = 1 << 20
		sec.add("peak_rss_mib", "peak RSS (VmHWM) of the draining process", "MiB", float64(rep.PeakRSS)/mib)
		sec.add("start_rss_mib", "RSS before the drain (connected, idle)", "MiB", float64(rep.StartRSS)/mib)
		sec.add("peak_heap_mib", "peak Go heap in use", "MiB", float64(rep.PeakHeap)/mib)
		sec.add("allocs_per_msg", "allocations per message", "allocs/msg", rep.AllocsPerMsg)
		sec.add("bytes_per_msg", "bytes allocated per message", "B/msg", rep.BytesPerMsg)
		sec.add("msgs_per_s", "drain rate", "msgs/s", rep.Rate)
		sec.add("drained", "messages drained (of the backlog) within the time limit", "msgs", float64(rep.Drained))
	}
	sec.note("The child drains for at most %s; allocations are per message sent. "+
		"RSS before the drain: the process connected, the forwarder not yet started.", cfg.memoryLimit)
	return nil
}
