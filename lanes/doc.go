// Package lanes maps ordering keys to lanes: FNV-1a 32-bit over the key's UTF-8 bytes,
// modulo the lane count. Every writer and forwarder of one outbox table, in any language,
// must compute the same lanes, so the function is pinned by test vectors.
package lanes
