// Package dsn hides the passwords of data source names before they reach output, logs or
// error messages: the examples and cmd/outboxctl print a DSN only through Redact, and pass
// driver errors through Scrub.
//
// It understands the forms the three dialects (and the AMQP URL) accept:
//
//	go-sql-driver/mysql   user:password@tcp(host:3306)/db?param=value
//	URL                   postgres://user:password@host/db?password=...
//	                      sqlserver://user:password@host:1433?database=db
//	                      amqp://user:password@host:5672/
//	keyword (pgx, libpq)  host=h user=u password='p w' dbname=db
//	ADO (go-mssqldb)      server=h;user id=u;password=p;database=db
//
// A PostgreSQL URL is split as pgx and libpq split it (the user information ends at the
// first '@' before the first '/'), and a password holding an unescaped '@' is masked
// whole and in parts, since pgx prints its tail as a host name.
//
// Anything it cannot parse is treated as secret: Redact keeps only what it can prove is
// not a password.
package dsn
