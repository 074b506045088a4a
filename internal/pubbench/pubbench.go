// Package pubbench holds what the benchmarks (the forwarder's and the harness's) share
// to publish side by side with the forwarder: publishing a set of messages from several
// goroutines at once.
package pubbench

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Concurrently publishes msgs to topic, one message per Publish call, from up to
// workers goroutines at once. It returns an error naming how many failed and the first
// failure, or nil.
func Concurrently(pub message.Publisher, topic string, msgs []*message.Message, workers int) error {
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Int64
		first  atomic.Value
	)
	for range min(max(workers, 1), len(msgs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(msgs)) {
					return
				}
				if err := pub.Publish(topic, msgs[i]); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("publish: %d of %d failed, first: %w", n, len(msgs), first.Load().(error))
	}
	return nil
}
