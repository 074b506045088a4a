package publisher

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// metadataCtx is the context Config.ExtraMetadata receives: the transaction's, or
// context.Background() for an attached transaction.
func (t *Tx) metadataCtx() context.Context {
	if t.txCtx == nil {
		return context.Background()
	}
	return t.txCtx
}

// metadata returns the metadata to store for msg: its own, plus what
// Config.ExtraMetadata adds under keys msg does not have (a new map; msg is unchanged).
func (o *Outbox) metadata(ctx context.Context, topic string, msg *message.Message) (message.Metadata, error) {
	if o.config.ExtraMetadata == nil {
		return msg.Metadata, nil
	}
	extra, err := o.config.ExtraMetadata(ctx, topic, msg)
	if err != nil {
		return nil, fmt.Errorf("ExtraMetadata: %w", err)
	}
	if len(extra) == 0 {
		return msg.Metadata, nil
	}
	md := make(message.Metadata, len(msg.Metadata)+len(extra))
	for k, v := range extra {
		md[k] = v
	}
	for k, v := range msg.Metadata {
		md[k] = v // the message's own value wins
	}
	return md, nil
}
