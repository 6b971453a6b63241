package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var (
	tagA = MakeTag("AAAA")
	tagB = MakeTag("BBBB")
	tagC = MakeTag("CCCC")
)

// build writes a snapshot whose sections hold the given items.
func build(t testing.TB, index uint64, secs map[Tag][][]byte, order ...Tag) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, index)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range order {
		w.Begin(tag)
		for _, it := range secs[tag] {
			w.Item(append(w.Buf(), it...))
		}
		w.End()
	}
	n, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Finish says %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// readAll returns every chunk payload of every section, concatenated per
// section, or the first error.
// eachChunk calls fn with each chunk of the section in turn (valid until
// fn returns), and returns the first error reading them.
func eachChunk(sr *SectionReader, fn func(p []byte)) error {
	for {
		p, err := sr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		fn(p)
	}
}

func readAll(data []byte) (uint64, map[Tag][]byte, error) {
	r, err := NewReader(bytes.NewReader(data), int64(len(data)), "snap")
	if err != nil {
		return 0, nil, err
	}
	out := map[Tag][]byte{}
	for _, s := range r.Sections() {
		sr, _ := r.Section(s.Tag)
		var all []byte
		if err := eachChunk(sr, func(p []byte) { all = append(all, p...) }); err != nil {
			return 0, nil, err
		}
		out[s.Tag] = all
	}
	return r.Index(), out, nil
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func sample(t testing.TB) ([]byte, map[Tag][][]byte) {
	secs := map[Tag][][]byte{
		tagA: {[]byte("one"), []byte("two"), bytes.Repeat([]byte("x"), 300)},
		tagB: nil, // an empty section
		tagC: {[]byte{1}},
	}
	return build(t, 42, secs, tagA, tagB, tagC), secs
}

func TestRoundTrip(t *testing.T) {
	data, secs := sample(t)
	idx, got, err := readAll(data)
	if err != nil {
		t.Fatal(err)
	}
	if idx != 42 {
		t.Fatalf("index %d", idx)
	}
	for tag, items := range secs {
		if want := bytes.Join(items, nil); !bytes.Equal(got[tag], want) {
			t.Fatalf("section %s: %q, want %q", tag, got[tag], want)
		}
	}
	r, _ := NewReader(bytes.NewReader(data), int64(len(data)), "snap")
	var tags []Tag
	for _, s := range r.Sections() {
		tags = append(tags, s.Tag)
	}
	if !slices.Equal(tags, []Tag{tagA, tagB, tagC}) {
		t.Fatalf("sections %v", tags)
	}
	if s := r.Sections()[0]; s.Items != 3 || s.Chunks != 1 {
		t.Fatalf("section A: %+v", s)
	}
	if err := r.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestLargeSection crosses the chunk target several times, with an item
// larger than the target, and checks that items never straddle chunks.
func TestLargeSection(t *testing.T) {
	var items [][]byte
	for i := range 20000 {
		items = append(items, []byte(fmt.Sprintf("item-%06d-%s", i, strings.Repeat("p", i%700))))
	}
	items = append(items, bytes.Repeat([]byte("L"), 3*TargetChunkBytes))
	data := build(t, 7, map[Tag][][]byte{tagA: items}, tagA)
	r, err := NewReader(bytes.NewReader(data), int64(len(data)), "snap")
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Sections()[0].Chunks; c < 3 {
		t.Fatalf("%d chunks", c)
	}
	sr, _ := r.Section(tagA)
	next := 0 // the item the next chunk must start with
	err = eachChunk(sr, func(p []byte) {
		for len(p) > 0 {
			if next == len(items) || !bytes.HasPrefix(p, items[next]) {
				t.Fatalf("chunk does not continue with whole item %d", next)
			}
			p = p[len(items[next]):]
			next++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != len(items) {
		t.Fatalf("%d of %d items read", next, len(items))
	}
}

// TestStreamSection writes a section as a byte stream in writes of every
// size, one across several chunks: the chunks hold the stream in order,
// each full but the last, one item each, and the writer's buffer never
// grows past one chunk.
func TestStreamSection(t *testing.T) {
	var want []byte
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 9)
	if err != nil {
		t.Fatal(err)
	}
	w.Begin(tagA)
	w.Item(append(w.Buf(), "an item"...))
	w.End()
	w.Begin(tagB)
	for i := range 3000 {
		p := bytes.Repeat([]byte{byte(i)}, i%1000+1)
		if i == 1500 {
			p = bytes.Repeat([]byte("S"), 2*TargetChunkBytes+17)
		}
		want = append(want, p...)
		if n, err := w.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		if c := cap(w.Buf()); c > TargetChunkBytes {
			t.Fatalf("the buffer grew to %d bytes", c)
		}
	}
	w.End()
	w.Begin(tagC) // an empty stream: no chunk
	w.Write(nil)
	w.End()
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	_, got, err := readAll(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[tagB], want) {
		t.Fatalf("stream read back: %d bytes, wrote %d", len(got[tagB]), len(want))
	}
	r, _ := NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "snap")
	// As few chunks as the bytes need, so each is full but the last.
	sr, _ := r.Section(tagB)
	info := sr.Info()
	if wantChunks := (len(want) + TargetChunkBytes - 1) / TargetChunkBytes; info.Items != uint64(wantChunks) || info.Chunks != uint32(wantChunks) {
		t.Fatalf("section B: %+v, want %d chunks", info, wantChunks)
	}
	if s, _ := r.Section(tagC); s.Info().Items != 0 || s.Info().Chunks != 0 {
		t.Fatalf("empty stream: %+v", s.Info())
	}
}

func TestWriterMisuse(t *testing.T) {
	for name, fn := range map[string]func(w *Writer){
		"item outside":  func(w *Writer) { w.Item(append(w.Buf(), 1)) },
		"empty item":    func(w *Writer) { w.Begin(tagA); w.Item(w.Buf()); w.End() },
		"duplicate tag": func(w *Writer) { w.Begin(tagA); w.End(); w.Begin(tagA); w.End() },
		"nested":        func(w *Writer) { w.Begin(tagA); w.Begin(tagB) },
		"not ended":     func(w *Writer) { w.Begin(tagA) },
		"reserved":      func(w *Writer) { w.Begin(dirTag); w.End() },
		"too large":     func(w *Writer) { w.Begin(tagA); w.Item(make([]byte, MaxChunkBytes+1)) },
		"write outside": func(w *Writer) { w.Write([]byte("x")) },
		"item then write": func(w *Writer) {
			w.Begin(tagA)
			w.Item(append(w.Buf(), 1))
			w.Write([]byte("x"))
			w.End()
		},
		"write then item": func(w *Writer) {
			w.Begin(tagA)
			w.Write([]byte("x"))
			w.Item(append(w.Buf(), 1))
			w.End()
		},
		"write then chunk": func(w *Writer) { w.Begin(tagA); w.Write([]byte("x")); w.Chunk([]byte("y"), 1); w.End() },
	} {
		w, _ := NewWriter(io.Discard, 1)
		fn(w)
		if _, err := w.Finish(); err == nil {
			t.Errorf("%s: Finish succeeded", name)
		}
	}
}

// TestCorruptEveryByte flips each byte of a snapshot in turn: every flip
// must be reported as a *CorruptError, never read as valid data.
func TestCorruptEveryByte(t *testing.T) {
	data, _ := sample(t)
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0xff
		_, _, err := readAll(bad)
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("byte %d flipped: %v, want a CorruptError", i, err)
		}
		if ce.File != "snap" || ce.Offset < 0 || ce.Offset > int64(len(data)) {
			t.Fatalf("byte %d flipped: %+v", i, ce)
		}
		// The error points at the part holding the byte, or (for a bad
		// directory or footer) at the directory or footer.
		if ce.Offset > int64(i) {
			t.Fatalf("byte %d flipped, reported at offset %d after it: %v", i, ce.Offset, err)
		}
	}
}

// TestTruncated cuts the file at every length: all are refused, and a cut
// inside the sections is reported at the chunk it cut.
func TestTruncated(t *testing.T) {
	data, _ := sample(t)
	r, _ := NewReader(bytes.NewReader(data), int64(len(data)), "snap")
	secA := r.Sections()[0]
	for n := range len(data) {
		_, _, err := readAll(data[:n])
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("cut at %d: %v, want a CorruptError", n, err)
		}
		if n >= headerSize+chunkHeaderSize+footerSize && n < int(secA.Offset+secA.Bytes) && ce.Offset != secA.Offset {
			t.Fatalf("cut at %d inside section A's chunk: reported at %d: %v", n, ce.Offset, err)
		}
		if n >= headerSize && !strings.Contains(err.Error(), "truncated") && !strings.Contains(err.Error(), "end of file") {
			t.Fatalf("cut at %d: message does not say truncated: %v", n, err)
		}
	}
	// Appended garbage is refused too: the footer is no longer last.
	if _, _, err := readAll(append(bytes.Clone(data), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// TestChunkFromOtherSnapshot: a chunk copied from a snapshot with another
// index fails its checksum.
func TestChunkFromOtherSnapshot(t *testing.T) {
	a, _ := sample(t)
	secs := map[Tag][][]byte{tagA: {[]byte("one"), []byte("two"), bytes.Repeat([]byte("x"), 300)}, tagC: {[]byte{1}}}
	b := build(t, 43, secs, tagA, MakeTag("BBBB"), tagC)
	if len(a) != len(b) {
		t.Fatal("sizes differ")
	}
	mixed := bytes.Clone(a)
	copy(mixed[headerSize:], b[headerSize:headerSize+chunkHeaderSize+306])
	if _, _, err := readAll(mixed); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("chunk of another snapshot: %v", err)
	}
}

// TestVersion: a sound header of another version (older or newer) is a
// *VersionError naming it, not damage; a damaged one is still damage.
func TestVersion(t *testing.T) {
	data, _ := sample(t)
	for _, v := range []uint32{0, Version + 1} {
		h := appendHeader(nil, 42)
		le.PutUint32(h[8:12], v)
		le.PutUint32(h[20:24], crc32c(h[:20]))
		_, _, err := readAll(append(h, data[headerSize:]...))
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Found != v || !strings.Contains(err.Error(), fmt.Sprintf("format version %d", v)) {
			t.Fatalf("version %d: %v", v, err)
		}
		h[20] ^= 1
		var ce *CorruptError
		if _, _, err := readAll(append(h, data[headerSize:]...)); !errors.As(err, &ce) {
			t.Fatalf("version %d with a bad header checksum: %v", v, err)
		}
	}
}

func TestFileCommitAndList(t *testing.T) {
	dir := t.TempDir()
	for _, idx := range []uint64{5, 17, 9} {
		f, err := Create(dir, idx, true)
		if err != nil {
			t.Fatal(err)
		}
		f.Begin(tagA)
		f.Item(append(f.Buf(), fmt.Sprint(idx)...))
		f.End()
		if _, err := f.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Create(dir, 99, true)
	if err != nil {
		t.Fatal(err)
	}
	f.Abort()
	// A leftover temporary file is not listed and RemoveTemp deletes it.
	os.WriteFile(filepath.Join(dir, FileName(100)+tmpSuffix), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(dir, "snap-1.snap"), []byte("junk"), 0o644)
	list, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var idxs []uint64
	for _, in := range list {
		idxs = append(idxs, in.Index)
		fr, err := Open(in.Path)
		if err != nil {
			t.Fatal(err)
		}
		if fr.Index() != in.Index || fr.Verify(nil) != nil {
			t.Fatalf("%s: index %d", in.Path, fr.Index())
		}
		fr.Close()
	}
	if !slices.Equal(idxs, []uint64{5, 9, 17}) {
		t.Fatalf("List: %v", idxs)
	}
	if err := RemoveTemp(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName(100)+tmpSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("temporary file survived RemoveTemp")
	}
	removed, err := Prune(dir, 2, true, 0, nil)
	if err != nil || len(removed) != 1 || removed[0] != list[0].Path {
		t.Fatalf("Prune: %v %v", removed, err)
	}
	to, err := MoveAside(list[2].Path)
	if err != nil || !strings.HasSuffix(to, ".corrupt") {
		t.Fatalf("MoveAside: %s %v", to, err)
	}
	if list, _ := List(dir); len(list) != 1 || list[0].Index != 9 {
		t.Fatalf("after prune and move: %v", list)
	}
}

func TestParseName(t *testing.T) {
	if idx, ok := ParseName(FileName(0xabc)); !ok || idx != 0xabc {
		t.Fatal("FileName does not parse back")
	}
	for _, bad := range []string{"snap-1.snap", "snap-0000000000000ABC.snap", "snap-0000000000000abc.snap.tmp",
		"snap-0000000000000abc.snap.corrupt", "wal-0000000000000001.log", "snap-000000000000000g.snap"} {
		if _, ok := ParseName(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzReader feeds arbitrary bytes to the reader: it must never panic,
// and whatever it accepts must re-encode to exactly the input (nothing is
// accepted that the writer would not have produced).
func FuzzReader(f *testing.F) {
	data, _ := sample(f)
	f.Add(data)
	f.Add(data[:len(data)-3])
	f.Add(build(f, 0, nil))
	f.Add([]byte(magic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewReader(bytes.NewReader(in), int64(len(in)), "fuzz")
		if err != nil {
			return
		}
		var buf bytes.Buffer
		w, _ := NewWriter(&buf, r.Index())
		for _, s := range r.Sections() {
			sr, _ := r.Section(s.Tag)
			w.Begin(s.Tag)
			if err := eachChunk(sr, func(p []byte) { w.Chunk(p, 1) }); err != nil {
				return
			}
			w.cur.Items = s.Items
			w.End()
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), in) {
			t.Fatalf("accepted input does not re-encode to itself")
		}
	})
}

// TestFileWrittenBack writes a file of several WritebackBytes ranges
// (each written back as it goes, see writeback) and reads every item
// back.
func TestFileWrittenBack(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(dir, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	item := bytes.Repeat([]byte("x"), 4000)
	const items = 5 * WritebackBytes / 4000
	f.Begin(tagA)
	for i := range items {
		b := binary.AppendUvarint(f.Buf(), uint64(i))
		f.Item(append(b, item...))
	}
	f.End()
	path, err := f.Commit(nil)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	sr, _ := fr.Section(tagA)
	var n uint64
	err = eachChunk(sr, func(p []byte) {
		for len(p) > 0 {
			i, k := binary.Uvarint(p)
			if i != n || !bytes.Equal(p[k:k+len(item)], item) {
				t.Fatalf("item %d reads back as item %d", n, i)
			}
			p = p[k+len(item):]
			n++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != items {
		t.Fatalf("%d items read back, want %d", n, items)
	}
}

// TestPruneInSteps checks that Prune takes a snapshot off its name before
// freeing any of it, frees it a step at a time, and that RemoveTemp
// deletes what a prune interrupted by a crash left.
func TestPruneInSteps(t *testing.T) {
	dir := t.TempDir()
	for _, idx := range []uint64{3, 4, 5} {
		f, err := Create(dir, idx, true)
		if err != nil {
			t.Fatal(err)
		}
		f.Begin(tagA)
		for i := range 1000 {
			f.Item(append(f.Buf(), fmt.Sprintf("item %d of %d", i, idx)...))
		}
		f.End()
		if _, err := f.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	oldest := filepath.Join(dir, FileName(3))
	info, err := os.Stat(oldest)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	step := func() {
		if _, err := os.Stat(oldest); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a step with the pruned snapshot still under its name: %v", err)
		}
		got, err := os.Stat(oldest + pruneSuffix)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, got.Size())
	}
	const stepBytes = 1000
	removed, err := Prune(dir, 2, true, stepBytes, step)
	if err != nil || !slices.Equal(removed, []string{oldest}) {
		t.Fatalf("Prune: %v %v", removed, err)
	}
	if want := int((info.Size() - 1) / stepBytes); len(sizes) != want || sizes[0] != info.Size()-stepBytes {
		t.Fatalf("steps at sizes %v of a %d-byte file, want %d steps of %d", sizes, info.Size(), want, stepBytes)
	}
	if _, err := os.Stat(oldest + pruneSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pruned file survived: %v", err)
	}
	// What a crash mid-prune leaves: a shortened file off the list.
	left := filepath.Join(dir, FileName(4)) + pruneSuffix
	if err := os.WriteFile(left, []byte("SNAP half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if list, err := List(dir); err != nil || len(list) != 2 {
		t.Fatalf("List with a .prune file: %v %v", list, err)
	}
	if err := RemoveTemp(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("an interrupted prune's file survived RemoveTemp")
	}
}
