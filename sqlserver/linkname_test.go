package sqlserver

import (
	_ "unsafe" // go:linkname

	_ "github.com/microsoft/go-mssqldb"
)

// quoteObjectName is go-mssqldb's quoting of the table name given to CopyIn (v1.11).
// Linking it lets a server-free test prove that the driver keeps our bracketed names.
//
//go:linkname quoteObjectName github.com/microsoft/go-mssqldb.quoteObjectName
func quoteObjectName(name string) (string, error)
