package lanes

const (
	offset32 = 2166136261
	prime32  = 16777619
)

// Hash returns the FNV-1a 32-bit hash of key's bytes.
func Hash(key string) uint32 {
	h := uint32(offset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime32
	}
	return h
}

// Of returns the lane of key among count lanes: Hash(key) mod count.
// A count below 1 is a programming error: Of panics with a message naming it.
func Of(key string, count int) int {
	if count < 1 {
		panic("lanes: lane count must be at least 1")
	}
	return int(Hash(key) % uint32(count))
}
