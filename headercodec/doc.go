// Package headercodec encodes message headers in the outbox's binary format:
//
//	uint32 version (= 1), uint32 entry count, then per entry
//	uint32 name length, name bytes (UTF-8), uint32 value length, value bytes
//
// with every integer little-endian. Entry order, duplicate names, empty values and
// arbitrary value bytes survive a round trip. Empty headers are the 8-byte prefix with a
// zero count, never an empty slice. Decode never allocates more than the input can
// describe, so hostile input cannot exhaust memory.
package headercodec
