package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Cleaner deletes inbox entries older than its window, in batches, while it holds the
// table's retention lease; instances of a service share the lease, so one of them
// cleans at a time. Start runs rounds every Interval until Stop; RunOnce runs one.
type Cleaner struct {
	store  outbox.Inbox
	config CleanerConfig
	logger watermill.LoggerAdapter
	token  outbox.Token

	mu      sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{}
}

// NewCleaner returns a Cleaner over store. A nil logger is watermill.NopLogger{}.
func NewCleaner(store outbox.Inbox, config CleanerConfig, logger watermill.LoggerAdapter) (*Cleaner, error) {
	if store == nil {
		return nil, errors.New("inbox: cleaner: store is nil")
	}
	config.setDefaults()
	if err := config.Validate(); err != nil {
		return nil, fmt.Errorf("inbox: cleaner: %w", err)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Cleaner{store: store, config: config, logger: logger, token: outbox.NewToken()}, nil
}

// Start runs cleaning rounds in a goroutine until Stop or ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return errors.New("inbox: cleaner already started")
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.stopped = make(chan struct{})
	go c.loop(ctx)
	return nil
}

// Stop ends the rounds, waits for the current one (until ctx ends) and gives the lease
// up so that another instance can take over at once.
func (c *Cleaner) Stop(ctx context.Context) error {
	c.mu.Lock()
	cancel, stopped := c.cancel, c.stopped
	c.cancel = nil
	c.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	_, err := c.store.ReleaseInboxLease(ctx, c.token)
	return err
}

func (c *Cleaner) loop(ctx context.Context) {
	defer close(c.stopped)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.logger.Error("inbox: cleaning round failed", err, nil)
		}
		t.Reset(c.config.Interval)
	}
}

// RunOnce takes (or renews) the lease and, while holding it, deletes the entries that
// were expired when it started, batch after batch until a batch deletes nothing (a
// batch may come back short while it passes over entries a duplicate's transaction
// holds). It returns how many it deleted; 0 and nil when another instance holds the
// lease.
func (c *Cleaner) RunOnce(ctx context.Context) (int, error) {
	total := 0
	before := c.config.Now().Add(-c.config.Window)
	for {
		held, err := c.acquire(ctx)
		if err != nil || !held {
			return total, err
		}
		n, err := c.store.PruneInbox(ctx, before, c.config.BatchSize)
		total += n
		if n > 0 {
			c.config.Metrics.Pruned(n)
		}
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		if n == 0 {
			c.report(ctx)
			return total, nil
		}
		if err := c.pause(ctx); err != nil {
			return total, err
		}
	}
}

func (c *Cleaner) acquire(ctx context.Context) (bool, error) {
	now := c.config.Now()
	held, err := c.store.AcquireInboxLease(ctx, outbox.InboxLeaseParams{
		Owner: c.config.Owner, Token: c.token, Now: now, Until: now.Add(c.config.LeaseTTL),
	})
	if err != nil {
		return false, fmt.Errorf("inbox: retention lease: %w", err)
	}
	return held, nil
}

func (c *Cleaner) pause(ctx context.Context) error {
	if c.config.BatchPause <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(c.config.BatchPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// report samples the table's size for Metrics (skipped when there are none).
func (c *Cleaner) report(ctx context.Context) {
	if _, none := c.config.Metrics.(nopMetrics); none {
		return
	}
	st, err := c.store.InboxStats(ctx)
	if err != nil {
		c.logger.Error("inbox: stats", err, nil)
		return
	}
	c.config.Metrics.Entries(st)
}
