// Package headercodec encodes message headers in the outbox's binary format, the
// headers column of every outbox row:
//
//	uint32 version (= 1), uint32 entry count, then per entry
//	uint32 name length, name bytes (UTF-8), uint32 value length, value bytes
//
// with every integer little-endian. Entry order, duplicate names, empty values and
// arbitrary value bytes survive a round trip. Empty headers are the 8-byte prefix with a
// zero count (exactly 01000000 00000000), never an empty slice. Watermill metadata is
// written sorted by name ([EncodeMetadata]), so equal maps give equal bytes. Decode never
// allocates more than the input can describe, so hostile input cannot exhaust memory.
//
// The format is pinned by golden vectors in headercodec_test.go and fuzzed; a reader in
// another language must agree with them byte for byte.
package headercodec
