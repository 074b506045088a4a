package outbox_test

import (
	"errors"
	"strings"
	"testing"

	outbox "github.com/relayer-go/watermill-outbox"
)

func TestOptionsWithDefaults(t *testing.T) {
	got := outbox.Options{}.WithDefaults()
	if got.Lanes != outbox.LanesDefault || got.Schema != "" || got.TablePrefix != "" {
		t.Fatalf("WithDefaults() = %+v", got)
	}
	set := outbox.Options{Schema: "s", TablePrefix: "p_", Lanes: 7}
	if got := set.WithDefaults(); got != set {
		t.Fatalf("WithDefaults changed set fields: %+v", got)
	}
	if err := (outbox.Options{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := []outbox.Options{
		{Lanes: 1},
		{Lanes: outbox.LanesMax},
		{Schema: "app", TablePrefix: "billing_", Lanes: 64},
		{Schema: "схема", TablePrefix: "préfixe_", Lanes: 32},
	}
	for _, o := range valid {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}

	invalid := []struct {
		name  string
		opts  outbox.Options
		field string
		says  string
	}{
		{"zero lanes without defaults", outbox.Options{}, "Lanes", "got 0"},
		{"negative lanes", outbox.Options{Lanes: -1}, "Lanes", "got -1"},
		{"too many lanes", outbox.Options{Lanes: outbox.LanesMax + 1}, "Lanes", "must be between 1 and 4096"},
		{"schema not UTF-8", outbox.Options{Lanes: 1, Schema: "a\xffb"}, "Schema", "not valid UTF-8"},
		{"schema with NUL", outbox.Options{Lanes: 1, Schema: "a\x00b"}, "Schema", "NUL"},
		{"prefix not UTF-8", outbox.Options{Lanes: 1, TablePrefix: "\xc3"}, "TablePrefix", "not valid UTF-8"},
		{"prefix with NUL", outbox.Options{Lanes: 1, TablePrefix: "p\x00"}, "TablePrefix", "NUL"},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			err := c.opts.Validate()
			if err == nil {
				t.Fatalf("%+v validated", c.opts)
			}
			if !errors.Is(err, outbox.ErrInvalidOptions) {
				t.Errorf("error %q does not wrap ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), ": "+c.field+": ") || !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not name field %s and say %q", err, c.field, c.says)
			}
		})
	}
}

func TestInvalidOptionNamesField(t *testing.T) {
	err := outbox.InvalidOption("PollInterval", "must be positive, got %v", -1)
	if !errors.Is(err, outbox.ErrInvalidOptions) {
		t.Fatalf("%v does not wrap ErrInvalidOptions", err)
	}
	if want := "outbox: invalid options: PollInterval: must be positive, got -1"; err.Error() != want {
		t.Fatalf("error = %q, want %q", err, want)
	}
}

func TestOptionsTablesAndSameTable(t *testing.T) {
	o := outbox.Options{TablePrefix: "app_"}
	if o.OutboxTable() != "app_outbox" || o.LanesTable() != "app_outbox_lanes" || o.NodesTable() != "app_outbox_nodes" {
		t.Fatalf("table names: %s %s %s", o.OutboxTable(), o.LanesTable(), o.NodesTable())
	}
	if !o.SameTable(outbox.Options{TablePrefix: "app_", Lanes: outbox.LanesDefault}) {
		t.Fatal("zero Lanes and LanesDefault should be the same table")
	}
	if o.SameTable(outbox.Options{TablePrefix: "app_", Lanes: 32}) {
		t.Fatal("different lane counts reported as the same table")
	}
	if o.SameTable(outbox.Options{TablePrefix: "app_", Schema: "other"}) {
		t.Fatal("different schemas reported as the same table")
	}
}
