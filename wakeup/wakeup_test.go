package wakeup_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/wakeup"
)

type spy struct {
	opts outbox.Options
	ch   chan outbox.Commit
}

func (s *spy) NotifierOptions() outbox.Options { return s.opts }
func (s *spy) Notify(c outbox.Commit)          { s.ch <- c }

func listen(t *testing.T, src *wakeup.Source, n outbox.Notifier) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Listen(ctx, n) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return errors.New("Listen did not return")
		}
	}
}

// A commit on the writer's side wakes the Source's notifier with its lanes; wake-ups of
// another table on the same topic are ignored.
func TestNotifierToSource(t *testing.T) {
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	defer ps.Close()
	opts := outbox.Options{TablePrefix: "a_", Lanes: 8}
	other := outbox.Options{TablePrefix: "b_", Lanes: 8}
	src, err := wakeup.NewSource(ps, "wake", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := &spy{opts: opts, ch: make(chan outbox.Commit, 16)}
	stop := listen(t, src, got)
	time.Sleep(50 * time.Millisecond) // subscribed (gochannel drops messages before)

	n, err := wakeup.NewNotifier(ps, "wake", opts, wakeup.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !n.NotifierOptions().SameTable(opts) {
		t.Fatalf("NotifierOptions %+v", n.NotifierOptions())
	}
	nOther, err := wakeup.NewNotifier(ps, "wake", other, wakeup.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nOther.Notify(outbox.Commit{Unordered: 1})
	if err := nOther.Close(); err != nil {
		t.Fatal(err)
	}
	n.Notify(outbox.Commit{Lanes: []int{5, 2}})
	select {
	case c := <-got.ch:
		if c.Unordered != 0 || !slices.Equal(c.Lanes, []int{2, 5}) {
			t.Fatalf("woken with %+v, want lanes 2 and 5", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	select {
	case c := <-got.ch:
		t.Fatalf("unexpected wake-up %+v (another table's?)", c)
	default:
	}
}

type failingSub struct{ closed chan *message.Message }

func (f failingSub) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	if f.closed == nil {
		return nil, errors.New("broker down")
	}
	return f.closed, nil
}
func (failingSub) Close() error { return nil }

// A subscription that fails or ends makes Listen return ErrWakeUnavailable.
func TestSourceUnavailable(t *testing.T) {
	opts := outbox.Options{}
	ended := make(chan *message.Message)
	close(ended)
	for name, sub := range map[string]failingSub{"fails": {}, "ends": {closed: ended}} {
		src, err := wakeup.NewSource(sub, "wake", opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = src.Listen(context.Background(), &spy{ch: make(chan outbox.Commit, 1)})
		if !errors.Is(err, outbox.ErrWakeUnavailable) {
			t.Errorf("%s: %v, want ErrWakeUnavailable", name, err)
		}
	}
}

type countingPub struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (p *countingPub) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.msgs = append(p.msgs, msgs...)
	p.mu.Unlock()
	return nil
}
func (p *countingPub) Close() error { return nil }

// A burst of commits becomes a few wake-ups (one per interval), each naming the table.
func TestNotifierCoalesces(t *testing.T) {
	pub := &countingPub{}
	opts := outbox.Options{Schema: "s", TablePrefix: "p_"}
	n, err := wakeup.NewNotifier(pub, "wake", opts, wakeup.Config{Interval: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; time.Since(start) < 100*time.Millisecond; i++ {
		n.Notify(outbox.Commit{Lanes: []int{i % 64}})
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.msgs) < 2 || len(pub.msgs) > 8 {
		t.Fatalf("%d wake-ups for a 100 ms burst at a 20 ms interval", len(pub.msgs))
	}
	if got := pub.msgs[0].Metadata.Get(wakeup.MetadataTable); got != "s.p_outbox" {
		t.Fatalf("table metadata %q", got)
	}
}

func TestInvalidArguments(t *testing.T) {
	pub := &countingPub{}
	for name, err := range map[string]error{
		"nil publisher": func() error {
			_, err := wakeup.NewNotifier(nil, "t", outbox.Options{}, wakeup.Config{}, nil)
			return err
		}(),
		"empty topic": func() error {
			_, err := wakeup.NewNotifier(pub, "", outbox.Options{}, wakeup.Config{}, nil)
			return err
		}(),
		"bad interval": func() error {
			_, err := wakeup.NewNotifier(pub, "t", outbox.Options{}, wakeup.Config{Interval: -1}, nil)
			return err
		}(),
		"nil subscriber": func() error { _, err := wakeup.NewSource(nil, "t", outbox.Options{}, nil); return err }(),
		"bad lanes": func() error {
			_, err := wakeup.NewSource(failingSub{}, "t", outbox.Options{Lanes: -1}, nil)
			return err
		}(),
	} {
		if !errors.Is(err, outbox.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}
