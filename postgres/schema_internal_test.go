package postgres

import "testing"

// TestMaxTablePrefixBytes: the constant leaves room for the longest generated suffix.
func TestMaxTablePrefixBytes(t *testing.T) {
	longest := 0
	for _, s := range generatedSuffixes {
		longest = max(longest, len(s))
	}
	if want := MaxIdentifierBytes - longest; MaxTablePrefixBytes != want {
		t.Fatalf("MaxTablePrefixBytes = %d; the longest suffix (%d bytes) leaves %d", MaxTablePrefixBytes, longest, want)
	}
}
