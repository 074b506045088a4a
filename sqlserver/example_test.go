package sqlserver_test

import (
	"fmt"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// CreateScript gives the idempotent T-SQL for a deployment tool; every CREATE and ALTER
// is guarded, so running it again changes nothing.
func ExampleCreateScript() {
	script, err := sqlserver.CreateScript(outbox.Options{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "IF ") {
			fmt.Println(line)
		}
	}
	// Output:
	// IF SCHEMA_ID(N'messaging') IS NULL
	// IF OBJECT_ID(N'[messaging].[orders_outbox]', N'U') IS NULL
	// IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_pending' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]'))
	// IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_lane_seq' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]'))
	// IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_parked' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]'))
	// IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_claims' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]'))
	// IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_pk' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]') AND allow_page_locks = 1)
	// IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_pending' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]') AND allow_page_locks = 1)
	// IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_parked' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]') AND allow_page_locks = 1)
	// IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_outbox_ix_claims' AND object_id = OBJECT_ID(N'[messaging].[orders_outbox]') AND allow_page_locks = 1)
	// IF OBJECT_ID(N'[messaging].[orders_outbox_lanes]', N'U') IS NULL
	// IF OBJECT_ID(N'[messaging].[orders_outbox_nodes]', N'U') IS NULL
	// IF OBJECT_ID(N'[messaging].[orders_inbox]', N'U') IS NULL
	// IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'orders_inbox_ix_age' AND object_id = OBJECT_ID(N'[messaging].[orders_inbox]'))
	// IF OBJECT_ID(N'[messaging].[orders_inbox_lease]', N'U') IS NULL
}

// Names are bracket-quoted by one helper; a ] in a name is doubled, never an end.
func ExampleQualifiedTable() {
	opts := outbox.Options{TablePrefix: "tenant]a_"}
	fmt.Println(sqlserver.QualifiedTable(opts, opts.OutboxTable()))
	// Output: [dbo].[tenant]]a_outbox]
}

// Invalid options fail at construction with an error naming the field.
func ExampleNew_invalidOptions() {
	_, err := sqlserver.New(nil, outbox.Options{TablePrefix: strings.Repeat("x", 107)})
	fmt.Println(err)
	// Output: outbox: invalid options: TablePrefix: is 107 UTF-16 code units long; at most 106 fit: the longest name made from it appends "outbox_df_message_uuid", and SQL Server names hold at most 128
}
