package dsn_test

import (
	"fmt"

	"github.com/relayer-go/watermill-outbox/internal/dsn"
)

func ExampleRedact() {
	fmt.Println(dsn.Redact("app:s3cret@tcp(db:3306)/shop"))
	fmt.Println(dsn.Redact("postgres://app:s3cret@db:5432/shop?sslmode=disable"))
	fmt.Println(dsn.Redact("host=db user=app password=s3cret dbname=shop"))
	fmt.Println(dsn.Redact("sqlserver://sa:s3cret@db:1433?database=shop"))
	// Output:
	// app:xxxxx@tcp(db:3306)/shop
	// postgres://app:xxxxx@db:5432/shop?sslmode=disable
	// host=db user=app password=xxxxx dbname=shop
	// sqlserver://sa:xxxxx@db:1433?database=shop
}

func ExampleScrub() {
	const d = "app:s3cret@tcp(db:3306)/shop"
	fmt.Println(dsn.Scrub("open "+d+": login failed for s3cret", d))
	// Output:
	// open app:xxxxx@tcp(db:3306)/shop: login failed for xxxxx
}
