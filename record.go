package outbox

import "time"

// Unordered is the lane value of a row without an ordering key (a NULL lane).
const Unordered = -1

// Status is the state of a row that has not been delivered yet (delivered rows are
// deleted).
type Status string

const (
	// StatusPending rows wait to be sent (or retried).
	StatusPending Status = "pending"
	// StatusParked rows are poison rows set aside after too many failures or because they
	// cannot be sent at all; they stay until requeued or purged.
	StatusParked Status = "parked"
)

// Record is one outbox row.
//
// When a store returns records, Headers and Body may share buffers with the slice the
// caller passed in (see each method); copy them to keep them past the next call.
type Record struct {
	ID ID
	// Seq is the row's place in its lane: a number the database assigns when the row is
	// inserted (at the writer's commit), so that a lane is read in the order its rows
	// were inserted, whatever the writers' clocks. Stores set it on the rows they return
	// (Head, Claim, ListParked); it is ignored on records to insert, and means nothing on
	// an unordered row (MySQL reports 0 there, the others the number they assigned). The
	// ID stays the row's identity.
	Seq         int64
	MessageUUID string // the Watermill message UUID, restored on republish
	Lane        int    // Unordered (-1) or 0..Lanes-1
	OrderingKey string // "" = none (stored as NULL)
	Transport   string // name of the target publisher; "" = the default one
	Destination string // the Watermill topic to republish to
	MessageType string // optional stable type name; "" = NULL
	Headers     []byte // metadata encoded with package headercodec
	Body        []byte
	// BodySize is the stored payload's length in bytes, set by Store.ListParked, whose
	// Body may hold only its first ParkedQuery.MaxBody bytes; 0 from the other reads,
	// whose Body is whole.
	BodySize int
	TenantID string // "" = NULL

	CreatedAt time.Time
	DeliverAt time.Time // zero on insert means CreatedAt

	Attempts  int
	LastError string
	Status    Status

	ClaimToken     Token     // zero = no claim
	ClaimExpiresAt time.Time // zero = no claim

	// Corrupt is set on a record returned by a read or claim whose stored bytes cannot be
	// decoded (for example corrupt headers). It is a *CorruptRowError naming the row; the
	// other fields hold what could be read. The other rows of the same call are unaffected.
	Corrupt error
}

// Ordered reports whether the record belongs to a lane.
func (r *Record) Ordered() bool { return r.Lane != Unordered }
