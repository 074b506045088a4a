package batchids

import outbox "github.com/relayer-go/watermill-outbox"

// Set holds the IDs of a batch's records.
type Set map[outbox.ID]struct{}

// Of returns the ID set of recs.
func Of(recs []outbox.Record) Set {
	s := make(Set, len(recs))
	for i := range recs {
		s[recs[i].ID] = struct{}{}
	}
	return s
}

// Has reports whether id is in the set.
func (s Set) Has(id outbox.ID) bool {
	_, ok := s[id]
	return ok
}

// Keep returns the IDs of list that are in the set, in list order.
func (s Set) Keep(list []outbox.ID) []outbox.ID {
	ids := make([]outbox.ID, 0, len(list))
	for _, id := range list {
		if s.Has(id) {
			ids = append(ids, id)
		}
	}
	return ids
}
