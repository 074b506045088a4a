package lanes_test

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/relayer-go/watermill-outbox/lanes"
)

// vectors pin the lane function for every writer in any language. The hashes of "", "a"
// and "foobar" are the published FNV-1a 32-bit test vectors.
var vectors = []struct {
	key            string
	hash           uint32
	lane32, lane64 int
}{
	{"", 0x811c9dc5, 5, 5},
	{"a", 0xe40c292c, 12, 44},
	{"foobar", 0xbf9cf968, 8, 40},
	// Multi-byte UTF-8 (2-, 2- and 3-byte runes): the hash is over the bytes, not runes.
	{"café-ключ-鍵", 0xfa154e30, 16, 48},
	{"order-42", 0x572446f4, 20, 52},
}

func stdFNV(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
}

func TestVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(fmt.Sprintf("%q", v.key), func(t *testing.T) {
			if got := lanes.Hash(v.key); got != v.hash {
				t.Errorf("Hash = %#08x, want %#08x", got, v.hash)
			}
			if got := stdFNV(v.key); got != v.hash {
				t.Errorf("hash/fnv = %#08x, vector says %#08x", got, v.hash)
			}
			if got := lanes.Of(v.key, 32); got != v.lane32 {
				t.Errorf("Of(_, 32) = %d, want %d", got, v.lane32)
			}
			if got := lanes.Of(v.key, 64); got != v.lane64 {
				t.Errorf("Of(_, 64) = %d, want %d", got, v.lane64)
			}
		})
	}
}

func TestMultiByteKeyIsHashedAsUTF8Bytes(t *testing.T) {
	const key = "café-ключ-鍵"
	if len(key) != 18 {
		t.Fatalf("test key is %d bytes, want 18 UTF-8 bytes", len(key))
	}
	if lanes.Hash(key) != stdFNV(key) {
		t.Fatal("Hash differs from hash/fnv over the UTF-8 bytes")
	}
}

// TestAgreesWithHashFNV cross-checks many keys and counts, including counts that are not
// powers of two and the edge count 1.
func TestAgreesWithHashFNV(t *testing.T) {
	counts := []int{1, 2, 3, 7, 32, 64, 100, 4096, 1 << 30}
	for i := 0; i < 2000; i++ {
		key := fmt.Sprintf("key-%d-%s", i, strings.Repeat("é", i%5))
		want := stdFNV(key)
		if got := lanes.Hash(key); got != want {
			t.Fatalf("Hash(%q) = %#08x, hash/fnv = %#08x", key, got, want)
		}
		for _, n := range counts {
			got := lanes.Of(key, n)
			if got != int(want%uint32(n)) {
				t.Fatalf("Of(%q, %d) = %d, want %d", key, n, got, want%uint32(n))
			}
			if got < 0 || got >= n {
				t.Fatalf("Of(%q, %d) = %d out of range", key, n, got)
			}
		}
	}
}

func TestOfPanicsOnCountBelowOne(t *testing.T) {
	for _, n := range []int{0, -1, -64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("Of(_, %d) did not panic", n)
				}
				msg := fmt.Sprint(r)
				if !strings.Contains(msg, "lane count must be at least 1") {
					t.Fatalf("panic message %q does not name the problem", msg)
				}
			}()
			lanes.Of("k", n)
		})
	}
}

func TestOfDoesNotAllocate(t *testing.T) {
	key := strings.Repeat("ordering-key/", 8)
	allocs := testing.AllocsPerRun(1000, func() {
		_ = lanes.Of(key, 64)
	})
	if allocs != 0 {
		t.Fatalf("Of allocates %v times per call, want 0", allocs)
	}
}

func ExampleOf() {
	fmt.Println(lanes.Of("foobar", 64))
	// Output: 40
}

var sink int

func BenchmarkOf(b *testing.B) {
	for _, key := range []string{"order-42", strings.Repeat("k", 64)} {
		b.Run(fmt.Sprintf("len=%d", len(key)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink += lanes.Of(key, 64)
			}
		})
	}
}

// BenchmarkOfBaseline is hash/fnv over the same keys, for the ratio.
func BenchmarkOfBaseline(b *testing.B) {
	for _, key := range []string{"order-42", strings.Repeat("k", 64)} {
		b.Run(fmt.Sprintf("len=%d", len(key)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h := fnv.New32a()
				h.Write([]byte(key))
				sink += int(h.Sum32() % 64)
			}
		})
	}
}
