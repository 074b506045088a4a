package sqlserver

import "strings"

// quoteIdent is the one place identifiers are quoted: brackets, with every ] doubled, so
// no name can end the delimited identifier early. Validation has already rejected NUL,
// invalid UTF-8 and names over 128 UTF-16 code units.
func quoteIdent(s string) string {
	return "[" + strings.ReplaceAll(s, "]", "]]") + "]"
}

// quoteString is the one place text is embedded in T-SQL as a literal (names given to
// OBJECT_ID, SCHEMA_ID and EXEC): a Unicode literal with every ' doubled.
func quoteString(s string) string {
	return "N'" + strings.ReplaceAll(s, "'", "''") + "'"
}
