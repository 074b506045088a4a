package forwarder

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// completerCount is the number of goroutines that run the deletes and failures of
// unordered rows, so that the claimer never waits for them.
const completerCount = 2

// storeJob is a delete (complete) or a failure of unordered rows, run by a completer.
type storeJob struct {
	complete *outbox.CompleteParams
	fail     *outbox.FailParams
	until    time.Time  // claim expiry: retrying after it is pointless
	window   *jobWindow // the claimer's window the job's rows still occupy; nil for none
}

// rows returns how many rows the job is about.
func (j storeJob) rows() int {
	if j.complete != nil {
		return len(j.complete.IDs)
	}
	return 1
}

// jobWindow counts the rows of one claimer that were acked or nacked but whose delete
// or failure has not landed yet. They stay in the claimer's window until then: a
// store that is slow or down must stop the claimer from sending more, or the rows
// whose deletes queue up (their claims expiring meanwhile) could all be sent again.
type jobWindow struct {
	rows atomic.Int64
	done chan struct{} // signalled (never blocking) when rows drop
}

func newJobWindow() *jobWindow { return &jobWindow{done: make(chan struct{}, 1)} }

func (w *jobWindow) add(n int) {
	if w != nil {
		w.rows.Add(int64(n))
	}
}

func (w *jobWindow) release(n int) {
	if w == nil {
		return
	}
	w.rows.Add(-int64(n))
	select {
	case w.done <- struct{}{}:
	default:
	}
}

// submit queues a store job; after the shutdown deadline it is dropped (the claim
// expires and the row is sent again). The job's rows stay in its window until it ends.
func (f *Forwarder) submit(j storeJob) {
	j.window.add(j.rows())
	select {
	case f.jobs <- j:
	case <-f.abandon:
		j.window.release(j.rows())
	}
}

// completer runs the store jobs of unordered rows (Forwarder.submit): the coalesced
// deletes of acked rows and the failures of nacked ones, off the claimers' goroutines,
// with completerCount goroutines, until Close closes the jobs channel.
type completer struct {
	f    *Forwarder
	jobs <-chan storeJob
}

func newCompleter(f *Forwarder) *completer {
	return &completer{f: f, jobs: f.jobs}
}

// run runs the jobs until the jobs channel is closed and drained.
func (c *completer) run() {
	var wg sync.WaitGroup
	for range completerCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range c.jobs {
				c.runJob(j)
				j.window.release(j.rows())
			}
		}()
	}
	wg.Wait()
}

// runJob retries a store job on errors until the claim it relies on has expired.
func (c *completer) runJob(j storeJob) {
	f := c.f
	delay := 20 * time.Millisecond
	if !f.now().Before(j.until) {
		return // the claim is gone: the store would change nothing
	}
	for {
		ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.ClaimTTL)
		var err error
		if j.complete != nil {
			err = c.complete(ctx, j.complete)
		} else {
			err = c.fail(ctx, j.fail)
		}
		cancel()
		if err == nil {
			return
		}
		if !f.now().Before(j.until) {
			f.logger.Error("Giving up a store update: the claim has expired", err, nil)
			return
		}
		f.logger.Error("Store update failed; retrying", err, watermill.LogFields{"retry_in": delay})
		select {
		case <-time.After(delay):
		case <-f.abandon:
			return
		}
		delay = min(2*delay, time.Second)
	}
}

// complete deletes acked rows, as of now.
func (c *completer) complete(ctx context.Context, p *outbox.CompleteParams) error {
	f := c.f
	p.Now = f.now()
	n, err := f.store.Complete(ctx, *p)
	if err == nil && n < len(p.IDs) {
		f.logger.Info("Some acked rows were not deleted (claim expired); they will be sent again",
			watermill.LogFields{"acked": len(p.IDs), "deleted": n})
	}
	return err
}

// fail records a failure, as of now (RetryAt stays relative to the failure), and counts
// it once recorded, as on the other paths.
func (c *completer) fail(ctx context.Context, p *outbox.FailParams) error {
	f := c.f
	p.Now = f.now()
	ok, err := f.store.Fail(ctx, *p)
	switch {
	case err == nil && ok:
		f.countFailed(p)
	case err == nil:
		f.logger.Debug("Failed row no longer claimed (claim expired)", watermill.LogFields{"row_id": p.ID.String()})
	}
	return err
}
