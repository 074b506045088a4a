package mysql_test

import (
	"fmt"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
)

// CreateScript gives the DDL to a deployment tool; identifiers are validated and quoted.
func ExampleCreateScript() {
	script, err := mysql.CreateScript(outbox.Options{Schema: "shop", TablePrefix: "orders_"})
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "CREATE") {
			fmt.Println(line)
		}
	}

	_, err = mysql.CreateScript(outbox.Options{TablePrefix: "orders_\U0001F4E6_"})
	fmt.Println(err)
	// Output:
	// CREATE TABLE IF NOT EXISTS `shop`.`orders_outbox` (
	// CREATE TABLE IF NOT EXISTS `shop`.`orders_outbox_lanes` (
	// CREATE TABLE IF NOT EXISTS `shop`.`orders_outbox_nodes` (
	// CREATE TABLE IF NOT EXISTS `shop`.`orders_inbox` (
	// CREATE TABLE IF NOT EXISTS `shop`.`orders_inbox_lease` (
	// outbox: invalid options: TablePrefix: contains the supplementary character U+1F4E6; MySQL identifiers allow only BMP characters (U+0001..U+FFFF)
}
