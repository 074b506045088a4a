// Package inscols names the optional columns of an outbox row that the dialects' INSERT
// statements leave out when no row of the statement uses them: the omitted columns take
// their defaults (NULL, the empty string or, for deliver_at, created_at). Every column an
// INSERT names costs each row its parsing and conversion on the server; naming only
// what the rows use made a 1,000-row INSERT about a fifth faster (benchmarks/README.md,
// "A narrower insert", and benchmarks/cmd/rowshape).
package inscols

import outbox "github.com/relayer-go/watermill-outbox"

// The optional columns, as bits of a set.
const (
	Lane = 1 << iota
	Key
	Transport
	Type
	Tenant
	Deliver // a deliver_at other than created_at
	All     = 1<<iota - 1
)

// Of returns the optional columns r needs.
func Of(r *outbox.Record) int {
	c := 0
	if r.Lane != outbox.Unordered {
		c |= Lane
	}
	if r.OrderingKey != "" {
		c |= Key
	}
	if r.Transport != "" {
		c |= Transport
	}
	if r.MessageType != "" {
		c |= Type
	}
	if r.TenantID != "" {
		c |= Tenant
	}
	if !r.DeliverAt.IsZero() && !r.DeliverAt.Equal(r.CreatedAt) {
		c |= Deliver
	}
	return c
}
