package dsn

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	cases := []struct {
		name, in, want, pw, host string
	}{
		{"mysql", "app:s3cret@tcp(db.example:3306)/shop?parseTime=true", "app:xxxxx@tcp(db.example:3306)/shop?parseTime=true", "s3cret", "db.example:3306"},
		{"mysql no password", "root@tcp(127.0.0.1:3306)/test", "root@tcp(127.0.0.1:3306)/test", "", "127.0.0.1:3306"},
		{"mysql password with @ : and /", "app:p@ss:w/rd@tcp(h:1)/db", "app:xxxxx@tcp(h:1)/db", "p@ss:w/rd", "h:1"},
		{"mysql password with =", "app:a=b@tcp(h:1)/db", "app:xxxxx@tcp(h:1)/db", "a=b", "h:1"},
		{"mysql default address", "app:pw@/db", "app:xxxxx@/db", "pw", "127.0.0.1:3306"},
		{"mysql unix socket", "app:pw@unix(/run/mysqld.sock)/db", "app:xxxxx@unix(/run/mysqld.sock)/db", "pw", "/run/mysqld.sock"},
		{"postgres URL", "postgres://app:s3cret@db:5432/shop?sslmode=disable", "postgres://app:xxxxx@db:5432/shop?sslmode=disable", "s3cret", "db:5432"},
		{"postgres URL no password", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "", "127.0.0.1:5432"},
		{"postgres URL password param", "postgresql://app@db/shop?password=s3cret&sslmode=disable", "postgresql://app@db/shop?password=xxxxx&sslmode=disable", "s3cret", "db"},
		{"postgres URL escaped password", "postgres://app:p%40ss%2Fw@db/shop", "postgres://app:xxxxx@db/shop", "p@ss/w", "db"},
		{"postgres URL password with @", "postgres://app:Abc@Secret123@127.0.0.1:5432/test", "postgres://app:xxxxx@127.0.0.1:5432/test", "Abc@Secret123", "127.0.0.1:5432"},
		{"postgres URL password with ? and #", "postgres://app:a?b#c@db/shop?sslmode=disable", "postgres://app:xxxxx@db/shop?sslmode=disable", "a?b#c", "db"},
		{"postgres URL password param with @", "postgres://app@db/shop?password=p%40ss&sslmode=disable", "postgres://app@db/shop?password=xxxxx&sslmode=disable", "p@ss", "db"},
		{"postgres URL broken escape", "postgres://app:100%@db/shop", "postgres://app:xxxxx@db/shop", "100%", "db"},
		{"postgres keywords", "host=db port=5432 user=app password=s3cret dbname=shop", "host=db port=5432 user=app password=xxxxx dbname=shop", "s3cret", "db:5432"},
		{"postgres keywords quoted", "host=db user=app password='s3 c\\'ret' dbname=shop", "host=db user=app password=xxxxx dbname=shop", "s3 c'ret", "db"},
		{"postgres keywords spaces", "host = db password = s3cret", "host = db password = xxxxx", "s3cret", "db"},
		{"sqlserver URL", "sqlserver://sa:Outbox_Test_2026!@127.0.0.1:1433?database=test", "sqlserver://sa:xxxxx@127.0.0.1:1433?database=test", "Outbox_Test_2026!", "127.0.0.1:1433"},
		{"sqlserver URL instance", "sqlserver://sa:pw@host/SQLEXPRESS?database=test", "sqlserver://sa:xxxxx@host/SQLEXPRESS?database=test", "pw", "host"},
		{"sqlserver ADO", "server=db;user id=sa;password=s3cret;database=test", "server=db;user id=sa;password=xxxxx;database=test", "s3cret", "db"},
		{"sqlserver ADO braces", "server=db;user id=sa;password={a;b}}c};database=test", "server=db;user id=sa;password=xxxxx;database=test", "a;b}c", "db"},
		{"amqp", "amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/", "guest", "127.0.0.1:5672"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Redact(c.in); got != c.want {
				t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
			}
			if got := Password(c.in); got != c.pw {
				t.Errorf("Password(%q) = %q, want %q", c.in, got, c.pw)
			}
			if got := Host(c.in); got != c.host {
				t.Errorf("Host(%q) = %q, want %q", c.in, got, c.host)
			}
			if c.pw != "" && strings.Contains(c.in, c.pw) && strings.Count(Redact(c.in), c.pw) >= strings.Count(c.in, c.pw) {
				t.Errorf("Redact(%q) still contains the password", c.in)
			}
		})
	}
}

func TestScrub(t *testing.T) {
	in := "app:s3cret@tcp(db:3306)/shop"
	msg := "open " + in + ": dial tcp: lookup db: no such host (password s3cret)"
	got := Scrub(msg, in)
	if strings.Contains(got, "s3cret") {
		t.Fatalf("Scrub left the password: %q", got)
	}
	if !strings.Contains(got, "app:xxxxx@tcp(db:3306)/shop") {
		t.Fatalf("Scrub did not keep the redacted DSN: %q", got)
	}
	url := "postgres://app:p%40ss@db/shop"
	if got := Scrub("cannot parse `postgres://app:p%40ss@db/shop`: p@ss", url); strings.Contains(got, "p@ss") || strings.Contains(got, "p%40ss") {
		t.Fatalf("Scrub left an escaped password: %q", got)
	}
}

// pgx ends a URL's user information at the first '@' and reads the rest as a host name,
// which its errors print: no part of the password survives Scrub.
func TestScrubPostgresPasswordWithAt(t *testing.T) {
	const d = "postgres://app:Abc@Secret123@127.0.0.1:5432/test"
	for _, msg := range []string{
		"lookup Secret123@127.0.0.1: no such host",
		"failed SASL auth (password Abc)",
		"cannot parse `" + d + "`",
	} {
		if got := Scrub(msg, d); strings.Contains(got, "Secret123") || strings.Contains(got, "Abc") {
			t.Errorf("Scrub(%q) = %q: part of the password is left", msg, got)
		}
	}
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{"a:b@tcp(h)/d", "postgres://a:b@h/d", "password=x host=y", "server=s;password={x}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, _ := parse(s)
		pw := Password(s)
		if len(pw) >= 3 && strings.Contains(r, pw) && !strings.Contains(Mask, pw) {
			// A password may legitimately equal another part (user name "guest" with
			// password "guest"), so only check that the password's own slot is masked.
			if strings.Count(r, pw) >= strings.Count(s, pw) {
				t.Fatalf("Redact(%q) = %q still shows password %q", s, r, pw)
			}
		}
	})
}
