package headercodec_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/headercodec"
)

var benchSizes = []int{256, 4096}

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

func metadataOf(hs []headercodec.Header) message.Metadata {
	md := make(message.Metadata, len(hs))
	for _, h := range hs {
		md[h.Name] = string(h.Value)
	}
	return md
}

func BenchmarkEncode(b *testing.B) {
	for _, size := range benchSizes {
		hs := makeHeaders(size)
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			buf := make([]byte, 0, size)
			for b.Loop() {
				buf = headercodec.Encode(buf[:0], hs)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, size := range benchSizes {
		hs := makeHeaders(size)
		src := headercodec.Encode(nil, hs)
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			dst := make([]headercodec.Header, 0, len(hs))
			for b.Loop() {
				var err error
				if dst, err = headercodec.Decode(src, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkValidate(b *testing.B) {
	for _, size := range benchSizes {
		src := headercodec.Encode(nil, makeHeaders(size))
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := headercodec.Validate(src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeMetadata(b *testing.B) {
	for _, size := range benchSizes {
		md := metadataOf(makeHeaders(size))
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			buf := make([]byte, 0, size)
			for b.Loop() {
				buf = headercodec.EncodeMetadata(buf[:0], md)
			}
		})
	}
}

// BenchmarkEncodeMetadataBaseline is JSON, the usual way to store Watermill metadata.
func BenchmarkEncodeMetadataBaseline(b *testing.B) {
	for _, size := range benchSizes {
		md := metadataOf(makeHeaders(size))
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := json.Marshal(md); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeMetadata(b *testing.B) {
	for _, size := range benchSizes {
		src := headercodec.EncodeMetadata(nil, metadataOf(makeHeaders(size)))
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := headercodec.DecodeMetadata(src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeMetadataBaseline is JSON, the usual way to store Watermill metadata.
func BenchmarkDecodeMetadataBaseline(b *testing.B) {
	for _, size := range benchSizes {
		src, err := json.Marshal(metadataOf(makeHeaders(size)))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(sizeName(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				var md message.Metadata
				if err := json.Unmarshal(src, &md); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
