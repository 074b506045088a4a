// Package inboxstats takes the inbox table's statistics with bounded reads, the same
// way for every dialect: it walks the consumers through the primary key (consumer,
// message_uuid), one index dive each, reads at most outbox.InboxStatsMaxEntries entries
// of each, takes the oldest entry from the processed_at index, and asks the engine's
// statistics for the table's size only when a count would have had to scan.
package inboxstats

import (
	"context"
	"slices"
	"strings"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Reader is a dialect's statements.
type Reader interface {
	// NextConsumer returns the first consumer after after ("" = the first one); ok false
	// when there is none.
	NextConsumer(ctx context.Context, after string) (consumer string, ok bool, err error)
	// Consumer counts at most limit entries of consumer (by primary key order) and
	// returns their count, oldest processedAt and duplicates.
	Consumer(ctx context.Context, consumer string, limit int) (entries int64, oldest time.Time, duplicates int64, err error)
	// Oldest returns the table's smallest processedAt (zero when empty).
	Oldest(ctx context.Context) (time.Time, error)
	// Estimate returns the engine's estimate of the table's rows.
	Estimate(ctx context.Context) (int64, error)
}

// Read takes the statistics through r.
func Read(ctx context.Context, r Reader) (outbox.InboxStats, error) {
	var st outbox.InboxStats
	after := ""
	for {
		consumer, ok, err := r.NextConsumer(ctx, after)
		if err != nil {
			return outbox.InboxStats{}, err
		}
		if !ok {
			break
		}
		if len(st.Consumers) == outbox.InboxStatsMaxConsumers {
			st.MoreConsumers = true
			break
		}
		c := outbox.InboxConsumerStats{Consumer: consumer}
		n, oldest, dups, err := r.Consumer(ctx, consumer, outbox.InboxStatsMaxEntries+1)
		if err != nil {
			return outbox.InboxStats{}, err
		}
		c.Entries, c.Duplicates, c.Capped = n, dups, n > outbox.InboxStatsMaxEntries
		if !c.Capped {
			c.Oldest = oldest.UTC()
		}
		st.Consumers = append(st.Consumers, c)
		after = consumer
	}
	if len(st.Consumers) == 0 {
		return st, nil
	}
	oldest, err := r.Oldest(ctx)
	if err != nil {
		return outbox.InboxStats{}, err
	}
	st.Oldest = oldest.UTC()
	if st.Partial() {
		if st.EstimatedEntries, err = r.Estimate(ctx); err != nil {
			return outbox.InboxStats{}, err
		}
	}
	slices.SortFunc(st.Consumers, func(a, b outbox.InboxConsumerStats) int { return strings.Compare(a.Consumer, b.Consumer) })
	return st, nil
}
