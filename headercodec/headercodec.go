package headercodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Version is the only format version this package reads and writes.
const Version = 1

const (
	prefixLen = 8 // version + count
	entryMin  = 8 // two length words
)

// Header is one entry.
type Header struct {
	Name  string
	Value []byte
}

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("headercodec: corrupt headers")

// EncodedLen returns the number of bytes Encode appends for hs.
func EncodedLen(hs []Header) int {
	n := prefixLen
	for i := range hs {
		n += entryMin + len(hs[i].Name) + len(hs[i].Value)
	}
	return n
}

// Encode appends the encoding of hs to dst and returns the extended slice.
//
// Names must be valid UTF-8. Encode cannot fail, so it does not check: a caller whose
// names come from outside checks the result with Validate before storing it, since
// Decode rejects invalid names.
func Encode(dst []byte, hs []Header) []byte {
	dst = grow(dst, EncodedLen(hs))
	dst = binary.LittleEndian.AppendUint32(dst, Version)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hs)))
	for i := range hs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hs[i].Name)))
		dst = append(dst, hs[i].Name...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(hs[i].Value)))
		dst = append(dst, hs[i].Value...)
	}
	return dst
}

func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) < n {
		next := make([]byte, len(dst), len(dst)+n)
		copy(next, dst)
		dst = next
	}
	return dst
}

// Decode decodes src, appending the entries to dst[:0] and returning the result. Values
// alias src (no copy); names are substrings of one new string holding all of them, so
// decoding into a reused dst costs at most one allocation. On error nothing useful is
// returned and the error wraps ErrCorrupt and says what is wrong.
func Decode(src []byte, dst []Header) ([]Header, error) {
	count, err := readPrefix(src)
	if err != nil {
		return dst[:0], err
	}
	// First pass: validate everything before allocating, and size the names.
	namesLen := 0
	if err := walk(src, count, func(name, _ []byte) { namesLen += len(name) }); err != nil {
		return dst[:0], err
	}
	if cap(dst) < count {
		dst = make([]Header, 0, count) // count is bounded by len(src)/entryMin
	}
	dst = dst[:0]
	var names string
	if namesLen > 0 {
		var sb strings.Builder
		sb.Grow(namesLen)
		for rest, i := src[prefixLen:], 0; i < count; i++ {
			var name []byte
			name, _, rest = next(rest)
			sb.Write(name)
		}
		names = sb.String()
	}
	off := 0
	for rest, i := src[prefixLen:], 0; i < count; i++ {
		var name, value []byte
		name, value, rest = next(rest)
		dst = append(dst, Header{Name: names[off : off+len(name)], Value: value[:len(value):len(value)]})
		off += len(name)
	}
	return dst, nil
}

// next splits one entry off input that walk has already validated.
func next(b []byte) (name, value, rest []byte) {
	n := 4 + int(binary.LittleEndian.Uint32(b))
	name, b = b[4:n], b[n:]
	n = 4 + int(binary.LittleEndian.Uint32(b))
	return name, b[4:n], b[n:]
}

// Validate checks that src is a well-formed encoding without allocating.
func Validate(src []byte) error {
	count, err := readPrefix(src)
	if err != nil {
		return err
	}
	return walk(src, count, func(_, _ []byte) {})
}

// readPrefix checks the fixed prefix and returns a count the input can hold.
func readPrefix(src []byte) (int, error) {
	if len(src) < prefixLen {
		return 0, fmt.Errorf("%w: %d bytes is shorter than the 8-byte prefix", ErrCorrupt, len(src))
	}
	if v := binary.LittleEndian.Uint32(src); v != Version {
		return 0, fmt.Errorf("%w: unknown version %d (want %d)", ErrCorrupt, v, Version)
	}
	count := binary.LittleEndian.Uint32(src[4:])
	if room := uint64(len(src)-prefixLen) / entryMin; uint64(count) > room {
		return 0, fmt.Errorf("%w: count %d cannot fit in %d remaining bytes", ErrCorrupt, count, len(src)-prefixLen)
	}
	return int(count), nil
}

func walk(src []byte, count int, visit func(name, value []byte)) error {
	rest := src[prefixLen:]
	for i := 0; i < count; i++ {
		name, tail, err := field(rest, i, "name")
		if err != nil {
			return err
		}
		if !utf8.Valid(name) {
			return fmt.Errorf("%w: entry %d: name is not valid UTF-8", ErrCorrupt, i)
		}
		value, tail, err := field(tail, i, "value")
		if err != nil {
			return err
		}
		visit(name, value)
		rest = tail
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes after %d entries", ErrCorrupt, len(rest), count)
	}
	return nil
}

func field(b []byte, entry int, what string) (data, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: entry %d: %s length past the end (%d bytes left, need 4)", ErrCorrupt, entry, what, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: entry %d: %s length %d past the end (%d bytes left)", ErrCorrupt, entry, what, n, len(b))
	}
	return b[:n], b[n:], nil
}

// EncodedMetadataLen returns the number of bytes EncodeMetadata appends for md, so that
// a caller can size one buffer for the headers and whatever follows them.
func EncodedMetadataLen(md message.Metadata) int {
	n := prefixLen
	for k, v := range md {
		n += entryMin + len(k) + len(v)
	}
	return n
}

// sortOnStack is the metadata size up to which EncodeMetadata sorts the names in a
// stack array, so that encoding allocates nothing when dst has room.
const sortOnStack = 32

// EncodeMetadata appends the encoding of md to dst, entries sorted by name so that equal
// maps give equal bytes. It allocates only to grow dst (and, above 32 entries, for the
// sorted names).
func EncodeMetadata(dst []byte, md message.Metadata) []byte {
	var stack [sortOnStack]string
	names := stack[:0]
	if len(md) > sortOnStack {
		names = make([]string, 0, len(md))
	}
	size := prefixLen
	for k, v := range md {
		names = append(names, k)
		size += entryMin + len(k) + len(v)
	}
	slices.Sort(names)
	dst = grow(dst, size)
	dst = binary.LittleEndian.AppendUint32(dst, Version)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(names)))
	for _, k := range names {
		v := md[k]
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(k)))
		dst = append(dst, k...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

// DecodeMetadata decodes src into a new message.Metadata. With duplicate names the last
// entry wins (Watermill metadata is a map). Names and values are substrings of one copy
// of src, so the allocations are that copy and the map, whatever the entry count.
func DecodeMetadata(src []byte) (message.Metadata, error) {
	if err := Validate(src); err != nil {
		return nil, err
	}
	md := make(message.Metadata, binary.LittleEndian.Uint32(src[4:]))
	decodeInto(md, src)
	return md, nil
}

// DecodeMetadataInto decodes src into md (a message's own Metadata, say, which saves
// the new map), as DecodeMetadata does: the last of duplicate names wins, and names and
// values are substrings of one copy of src. An invalid src leaves md unchanged.
func DecodeMetadataInto(md message.Metadata, src []byte) error {
	if err := Validate(src); err != nil {
		return err
	}
	decodeInto(md, src)
	return nil
}

// decodeInto adds the entries of src, already validated, to md.
func decodeInto(md message.Metadata, src []byte) {
	count := int(binary.LittleEndian.Uint32(src[4:]))
	if count == 0 {
		return
	}
	all := string(src)
	for off, i := prefixLen, 0; i < count; i++ {
		n := int(binary.LittleEndian.Uint32(src[off:]))
		name := all[off+4 : off+4+n]
		off += 4 + n
		n = int(binary.LittleEndian.Uint32(src[off:]))
		md[name] = all[off+4 : off+4+n]
		off += 4 + n
	}
}
