package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

func TestChannel(t *testing.T) {
	if got := postgres.Channel(outbox.Options{TablePrefix: "app_"}); got != "outbox:app_outbox" {
		t.Errorf("Channel = %q", got)
	}
	if got := postgres.Channel(outbox.Options{Schema: "Sales", TablePrefix: `we"ird_`}); got != `outbox:Sales.we"ird_outbox` {
		t.Errorf("Channel = %q", got)
	}
	long1 := outbox.Options{Schema: strings.Repeat("é", 31), TablePrefix: "a_"}
	long2 := outbox.Options{Schema: strings.Repeat("é", 31), TablePrefix: "b_"}
	c1, c2 := postgres.Channel(long1), postgres.Channel(long2)
	for _, c := range []string{c1, c2} {
		if len(c) > postgres.MaxIdentifierBytes || !utf8.ValidString(c) {
			t.Errorf("long channel %q: %d bytes, valid UTF-8 %v", c, len(c), utf8.ValidString(c))
		}
	}
	if c1 == c2 {
		t.Errorf("distinct tables share channel %q", c1)
	}
}

func TestListenerNotifierOptions(t *testing.T) {
	if _, err := postgres.NewListener("postgres://x@127.0.0.1:1/db?connect_timeout=bad", outbox.Options{}, postgres.ListenerConfig{}, nil); !errors.Is(err, outbox.ErrInvalidOptions) {
		t.Errorf("bad DSN: %v, want ErrInvalidOptions", err)
	}
	if _, err := postgres.NewListener("postgres://x@127.0.0.1:1/db", outbox.Options{}, postgres.ListenerConfig{ReconnectMin: 2, ReconnectMax: 1}, nil); !errors.Is(err, outbox.ErrInvalidOptions) {
		t.Errorf("ReconnectMax < ReconnectMin: %v, want ErrInvalidOptions", err)
	}
	l, err := postgres.NewListener("postgres://x@127.0.0.1:1/db", outbox.Options{TablePrefix: "p_"}, postgres.ListenerConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Channel() != "outbox:p_outbox" {
		t.Errorf("Channel %q", l.Channel())
	}
	if _, err := postgres.NewNotifier(nil, outbox.Options{}, postgres.NotifierConfig{}, nil); err == nil {
		t.Error("nil db accepted")
	}
}
