package batchids

import (
	"slices"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
)

func TestKeepFiltersToTheBatchInListOrder(t *testing.T) {
	a, b, c, outside := outbox.NewID(), outbox.NewID(), outbox.NewID(), outbox.NewID()
	s := Of([]outbox.Record{{ID: a}, {ID: b}, {ID: c}})
	if got := s.Keep([]outbox.ID{c, outside, a}); !slices.Equal(got, []outbox.ID{c, a}) {
		t.Fatalf("Keep = %v, want [c a]", got)
	}
	if s.Has(outside) || !s.Has(b) {
		t.Fatal("Has is wrong")
	}
	if got := s.Keep(nil); len(got) != 0 {
		t.Fatalf("Keep(nil) = %v", got)
	}
}
