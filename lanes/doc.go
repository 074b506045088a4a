// Package lanes maps ordering keys to lanes: FNV-1a 32-bit over the key's UTF-8 bytes,
// modulo the lane count.
//
// This is a wire format: every writer and forwarder of one outbox table, in any
// language, must compute the same lanes, so the function is pinned by the test vectors
// in lanes_test.go ("foobar" hashes to 0xbf9cf968, lane 40 of 64). Writers compute the
// lane (Of(key, Options.Lanes)) and forwarders own lanes by number, so every writer and
// forwarder of a table must also use the same lane count (outbox.Options.Lanes, default
// 64); changing it requires draining the table first (docs/operations.md).
package lanes
