package publisher

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Metadata keys read by the default Config functions. They are ordinary Watermill
// metadata: they stay in the stored headers and travel with the message when the
// forwarder republishes it (a Kafka marshaler can use outbox_ordering_key as the
// partition key, for example), so the metadata a consumer sees is exactly the metadata
// the application published.
const (
	// MetadataOrderingKey holds the ordering key: messages with the same key are sent in
	// the order they were published (they share a lane). Empty or absent: unordered.
	MetadataOrderingKey = "outbox_ordering_key"
	// MetadataDeliverAt holds the earliest delivery time in RFC 3339 with optional
	// fractional seconds (time.RFC3339Nano, as written by SetDeliverAt). Empty or absent:
	// deliver at once.
	MetadataDeliverAt = "outbox_deliver_at"
	// MetadataTransport names the forwarder's target publisher ("kafka", "amqp", ...).
	// Empty or absent: the forwarder's default publisher.
	MetadataTransport = "outbox_transport"
	// MetadataMessageType holds an optional stable type name (routing, observability).
	MetadataMessageType = "outbox_message_type"
	// MetadataTenantID holds an optional tenant identifier.
	MetadataTenantID = "outbox_tenant_id"
)

// Config configures an Outbox. The zero value is usable: every nil function reads the
// matching metadata key.
//
// The per-message functions are called by Publish, once per message, before the message
// is buffered; like watermill-kafka's partition key generator they receive the topic and
// the message. They run concurrently when Publish is called concurrently, and must not
// call the Tx they were called from. An error refuses the whole Publish call (nothing of
// it is buffered) and is returned wrapped, naming the message.
type Config struct {
	// OrderingKey returns the message's ordering key ("" = unordered). The lane is
	// lanes.Of(key, store.Options().Lanes). Default: OrderingKeyFromMetadata.
	OrderingKey func(topic string, msg *message.Message) (string, error)
	// DeliverAt returns the earliest delivery time (zero = at once). Default:
	// DeliverAtFromMetadata.
	DeliverAt func(topic string, msg *message.Message) (time.Time, error)
	// Transport names the forwarder's target publisher ("" = default). Default:
	// TransportFromMetadata.
	Transport func(topic string, msg *message.Message) (string, error)
	// MessageType returns an optional stable type name. Default: MessageTypeFromMetadata.
	MessageType func(topic string, msg *message.Message) (string, error)
	// TenantID returns an optional tenant. Default: TenantIDFromMetadata.
	TenantID func(topic string, msg *message.Message) (string, error)

	// ExtraMetadata, when set, returns metadata to store with the message beside its
	// own: ctx is the context the transaction was begun with (Begin, BeginConn, WithTx,
	// the message's context under Middleware; context.Background() for an attached
	// transaction). A key the message already has keeps the message's value; the
	// caller's message is never changed. Package otel of this repository's
	// OpenTelemetry module uses it to record the W3C trace context and baggage
	// (traceparent, tracestate, baggage). Returning nil adds nothing and allocates
	// nothing. Defaults to nil (nothing added).
	ExtraMetadata func(ctx context.Context, topic string, msg *message.Message) (message.Metadata, error)

	// Notifier, when set, is told after every successful commit which lanes and how
	// many unordered rows were written, so that a forwarder in this process sends them
	// at once. It must serve the same table as the store (same Options): New refuses
	// another one with outbox.ErrNotifierMismatch. A notifier never fails a commit.
	Notifier outbox.Notifier
	// Notifiers are told too, after Notifier, under the same rules: link the
	// cross-process wake-ups here (postgres.Notifier, wakeup.Notifier) next to the
	// forwarder of this process, if any.
	Notifiers []outbox.Notifier

	// Now stamps created_at (default time.Now). Tests pass a fixed clock.
	Now func() time.Time

	// TxOptions are used by Begin and BeginConn (nil: the driver's defaults). ReadOnly
	// is refused: an outbox transaction writes.
	TxOptions *sql.TxOptions
}

func (c *Config) setDefaults() {
	if c.OrderingKey == nil {
		c.OrderingKey = OrderingKeyFromMetadata
	}
	if c.DeliverAt == nil {
		c.DeliverAt = DeliverAtFromMetadata
	}
	if c.Transport == nil {
		c.Transport = TransportFromMetadata
	}
	if c.MessageType == nil {
		c.MessageType = MessageTypeFromMetadata
	}
	if c.TenantID == nil {
		c.TenantID = TenantIDFromMetadata
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration error naming the field (wrapping
// outbox.ErrInvalidOptions). New calls it after filling the defaults.
func (c Config) Validate() error {
	if c.TxOptions != nil && c.TxOptions.ReadOnly {
		return outbox.InvalidOption("TxOptions.ReadOnly", "an outbox transaction writes rows; a read-only transaction cannot hold it")
	}
	return nil
}

// OrderingKeyFromMetadata returns msg's MetadataOrderingKey value.
func OrderingKeyFromMetadata(_ string, msg *message.Message) (string, error) {
	return msg.Metadata.Get(MetadataOrderingKey), nil
}

// DeliverAtFromMetadata parses msg's MetadataDeliverAt value (RFC 3339; zero when
// absent or empty).
func DeliverAtFromMetadata(_ string, msg *message.Message) (time.Time, error) {
	v := msg.Metadata.Get(MetadataDeliverAt)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("metadata %s: %w", MetadataDeliverAt, err)
	}
	return t, nil
}

// TransportFromMetadata returns msg's MetadataTransport value.
func TransportFromMetadata(_ string, msg *message.Message) (string, error) {
	return msg.Metadata.Get(MetadataTransport), nil
}

// MessageTypeFromMetadata returns msg's MetadataMessageType value.
func MessageTypeFromMetadata(_ string, msg *message.Message) (string, error) {
	return msg.Metadata.Get(MetadataMessageType), nil
}

// TenantIDFromMetadata returns msg's MetadataTenantID value.
func TenantIDFromMetadata(_ string, msg *message.Message) (string, error) {
	return msg.Metadata.Get(MetadataTenantID), nil
}

// SetDeliverAt sets msg's MetadataDeliverAt to t (UTC, RFC 3339 with nanoseconds), the
// format DeliverAtFromMetadata reads.
func SetDeliverAt(msg *message.Message, t time.Time) {
	msg.Metadata.Set(MetadataDeliverAt, t.UTC().Format(time.RFC3339Nano))
}
