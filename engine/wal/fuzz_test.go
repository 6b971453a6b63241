package wal

import (
	"bytes"
	"hash/crc32"
	"testing"
)

// segmentBytes builds a segment starting at index 1 holding payloads.
func segmentBytes(payloads ...string) []byte {
	b := appendSegmentHeader(nil, 1)
	for i, p := range payloads {
		b = appendRecord(b, uint64(i+1), []byte(p), crc32c([]byte(p)))
	}
	return b
}

// refRecordAt is an independent decoder for one record: it reports whether
// data holds, at off, a record that verifies, and its index and end.
func refRecordAt(data []byte, off int) (index uint64, end int, ok bool) {
	if off < 0 || len(data)-off < 16 {
		return 0, 0, false
	}
	n := int(uint32(data[off]) | uint32(data[off+1])<<8 | uint32(data[off+2])<<16 | uint32(data[off+3])<<24)
	if n > MaxRecordBytes || len(data)-off-16 < n {
		return 0, 0, false
	}
	var in []byte
	in = append(in, data[off+16:off+16+n]...)
	in = append(in, data[off:off+4]...)
	in = append(in, data[off+8:off+16]...)
	want := uint32(data[off+4]) | uint32(data[off+5])<<8 | uint32(data[off+6])<<16 | uint32(data[off+7])<<24
	if crc32.Checksum(in, crc32.MakeTable(crc32.Castagnoli)) != want {
		return 0, 0, false
	}
	for i := 7; i >= 0; i-- {
		index = index<<8 | uint64(data[off+8+i])
	}
	return index, off + 16 + n, true
}

// FuzzDecode feeds arbitrary bytes to the segment decoder, both as a whole
// file and as the records after a valid header. The decoder must not panic,
// must return exactly the records that verify, in order, up to the first
// spot that does not, and must call a bad spot torn only if no record that
// verifies follows it.
func FuzzDecode(f *testing.F) {
	good := segmentBytes("a", "", "hello, world", string(make([]byte, 300)))
	f.Add([]byte{})
	f.Add(good)
	f.Add(good[headerSize:])
	f.Add(good[:len(good)-7])
	f.Add(append(bytes.Clone(good), make([]byte, 64)...))
	f.Add(append(bytes.Clone(good), 0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4))
	mid := bytes.Clone(good)
	mid[headerSize+recordHeaderSize+1+5] ^= 1 // second record's checksum
	f.Add(mid)
	wrongIndex := appendRecord(segmentBytes("x"), 5, []byte("y"), crc32c([]byte("y")))
	f.Add(wrongIndex)
	f.Add([]byte(segmentMagic + "\x02\x00\x00\x00"))

	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		checkDecode(t, append(appendSegmentHeader(nil, 1), data...))
	})
}

// fuzzScanner is reused across inputs, as Open reuses one across segments,
// which also tests that no state leaks from one scan into the next.
var fuzzScanner = newScanner()

func checkDecode(t *testing.T, data []byte) {
	type got struct {
		index uint64
		off   int64
		data  []byte
	}
	var recs []got
	sc := fuzzScanner
	res, err := sc.scanSegment(bytes.NewReader(data), int64(len(data)), 1, true,
		func(index uint64, off int64, payload []byte) (bool, error) {
			recs = append(recs, got{index, off, bytes.Clone(payload)})
			return false, nil
		})
	if err != nil {
		t.Fatalf("scan of in-memory data failed: %v", err)
	}
	headerOK := checkSegmentHeader(data, 1) == nil
	if !headerOK {
		if len(recs) != 0 || res.bad == nil || res.bad.offset != 0 || res.bad.canBeTorn {
			t.Fatalf("bad header: got %d records, damage %+v", len(recs), res.bad)
		}
		return
	}
	off := headerSize
	for i, r := range recs {
		idx, end, ok := refRecordAt(data, off)
		if !ok || r.off != int64(off) || idx != uint64(i+1) || r.index != idx ||
			!bytes.Equal(r.data, data[off+recordHeaderSize:end]) {
			t.Fatalf("record %d at %d does not match the reference decoder", i, r.off)
		}
		off = end
	}
	if res.end != int64(off) || res.last != uint64(len(recs)) || res.records != int64(len(recs)) {
		t.Fatalf("result %+v disagrees with %d records ending at %d", res, len(recs), off)
	}
	if res.bad == nil {
		if off != len(data) {
			t.Fatalf("clean end at %d of %d bytes", off, len(data))
		}
		return
	}
	if res.bad.offset != int64(off) {
		t.Fatalf("damage reported at %d, records end at %d", res.bad.offset, off)
	}
	idx, _, ok := refRecordAt(data, off)
	if ok && idx == res.last+1 {
		t.Fatalf("decoder stopped at %d, but a valid record %d is there", off, idx)
	}
	if ok != !res.bad.canBeTorn {
		t.Fatalf("record at %d verifies=%v but canBeTorn=%v", off, ok, res.bad.canBeTorn)
	}
	if !res.bad.canBeTorn {
		return
	}
	// Brute force: is there a verifying record after the bad spot, with an
	// index the records in between could lead to?
	found := false
	for p := off + 1; p+16 <= len(data) && !found; p++ {
		var idx uint64
		for i := 7; i >= 0; i-- {
			idx = idx<<8 | uint64(data[p+8+i])
		}
		if idx <= res.last || idx-res.last > uint64((p-off)/16)+1 {
			continue // checked first only to keep the brute force fast
		}
		if ridx, _, ok := refRecordAt(data, p); ok && ridx == idx {
			found = true
		}
	}
	if found != res.bad.validAfter {
		t.Fatalf("valid record after %d: brute force %v, decoder %v", off, found, res.bad.validAfter)
	}
}
