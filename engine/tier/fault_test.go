package tier

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// coldTable returns a table whose one window (n posts) is in a file, with
// no block cache, and the file's path.
func coldTable(t *testing.T, n int) (*Posts, []uint64, string) {
	t.Helper()
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.OpenAge, opts.ColdAge, opts.ColdCacheBytes = -1, time.Nanosecond, -1
	tr, err := NewPosts(opts)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = snowflake.Make(testEpoch.UnixMilli()+int64(i%testWindow), uint64(i/testWindow), 0)
		if err := tr.Put(ids[i], Post{Author: uint64(i + 1), Counts: engine.Counts{Likes: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Maintain(testEpoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	files := tr.Files()
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	return tr, ids, filepath.Join(dir, files[0])
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptColdBlock: a damaged block is an error naming the file and
// offset, from Get, GetMany, Put and AddCounts, and from a job that
// would fold it; the other blocks still read; nothing reads as absent.
func TestCorruptColdBlock(t *testing.T) {
	tr, ids, path := coldTable(t, 1000)
	if err := tr.VerifyFiles(); err != nil {
		t.Fatal(err)
	}
	f := tr.wins[0].body.(*coldWindow)
	off, end := f.idx.span(1)
	flipByte(t, path, int64(off+(end-off)/2))
	if err := tr.VerifyFiles(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifyFiles over a damaged block: %v", err)
	}
	first3, first4 := f.idx.firstID(1), f.idx.firstID(2)
	var bad, good uint64
	for _, id := range ids {
		if id >= first3 && id < first4 {
			bad = id
		}
		if id >= first4 {
			good = id
		}
	}
	_, ok, err := tr.Get(bad)
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.File != filepath.Base(path) || ce.Offset != int64(off) || ok {
		t.Fatalf("Get of a damaged block: ok %v err %v", ok, err)
	}
	if p, ok, err := tr.Get(good); err != nil || !ok || p.Author == 0 {
		t.Fatalf("Get of an intact block: %+v %v %v", p, ok, err)
	}
	out := make([]Post, 3)
	found := make([]bool, 3)
	if err := tr.GetMany([]uint64{good, bad, ids[0]}, out, found); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetMany: %v", err)
	}
	if err := tr.Range(func(uint64, Post) bool { return true }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Range over a damaged block: %v", err)
	}
	if err := tr.Put(bad+1, Post{Author: 9}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Put into a damaged block's range: %v", err)
	}
	if _, _, err := tr.AddCounts(bad, engine.Counts{Likes: 1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("AddCounts: %v", err)
	}
	// A compaction that must read the block fails and leaves the window
	// and its delta as they were.
	for i := range 200 {
		if err := tr.Put(ids[len(ids)-1]+uint64(i+1), Post{Author: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Maintain(testEpoch.Add(time.Hour)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Maintain over a damaged file: %v", err)
	}
	if p, ok, err := tr.Get(ids[len(ids)-1] + 7); err != nil || !ok || p.Author != 5 {
		t.Fatalf("delta after a failed job: %+v %v %v", p, ok, err)
	}
	if got := tr.Files(); len(got) != 1 || got[0] != filepath.Base(path) {
		t.Fatalf("files after a failed job: %v", got)
	}
}

// TestTruncatedColdFile: a file cut short fails to open (its footer is
// gone) on Load, and a file whose blocks are cut after it was opened
// reads as an error.
func TestTruncatedColdFile(t *testing.T) {
	tr, ids, path := coldTable(t, 1000)
	var snap bytes.Buffer
	if _, err := tr.WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.Get(ids[len(ids)-1]); err == nil {
		t.Fatal("Get past the end of a truncated file: no error")
	}
	other, _ := NewPosts(tr.opts)
	if err := other.Load(bytes.NewReader(snap.Bytes())); err == nil {
		t.Fatal("Load over a truncated cold file: no error")
	}
	if other.Len() != 0 {
		t.Fatal("a failed Load changed the table")
	}
}

// TestTornSnapshot: every prefix of an image, and every single-byte
// change to it, is refused with ErrCorrupt and leaves the table as it
// was.
func TestTornSnapshot(t *testing.T) {
	tr, ids, _ := coldTable(t, 300)
	for i := range 50 { // an open window and a delta too
		tr.Put(snowflake.Make(testEpoch.UnixMilli()+5000+int64(i), 0, 0), Post{Author: 1})
		tr.Put(ids[i]+1<<12, Post{Author: 2})
	}
	var snap bytes.Buffer
	if _, err := tr.WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	img := snap.Bytes()
	fresh := func() *Posts {
		p, _ := NewPosts(tr.opts)
		p.Put(ids[0], Post{Author: 77})
		return p
	}
	for cut := 0; cut < len(img); cut += 1 + cut/16 {
		p := fresh()
		if err := p.Load(bytes.NewReader(img[:cut])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Load of %d of %d bytes: %v", cut, len(img), err)
		}
		if got, ok, _ := p.Get(ids[0]); !ok || got.Author != 77 || p.Len() != 1 {
			t.Fatal("a failed Load changed the table")
		}
	}
	for i := 0; i < len(img); i += 1 + i/64 {
		bad := bytes.Clone(img)
		bad[i] ^= 0x10
		p := fresh()
		if err := p.Load(bytes.NewReader(bad)); err == nil {
			t.Fatalf("Load with byte %d changed: no error", i)
		}
	}
	p := fresh()
	if err := p.Load(io.MultiReader(bytes.NewReader(img))); err != nil {
		t.Fatal(err)
	}
	if p.Len() != tr.Len() {
		t.Fatalf("Len %d after Load, %d before", p.Len(), tr.Len())
	}
}

// TestCorruptSealedImage: a sealed window in a snapshot is verified block
// by block, so a damaged block with a recomputed image checksum is still
// refused.
func TestCorruptSealedImage(t *testing.T) {
	p, _ := NewPosts(testOpts(""))
	var buf bytes.Buffer
	pw := newPostWriter(&buf)
	for i := range 500 {
		if err := pw.add(uint64(1000+3*i), &postRow{uint64(i), 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.close(); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	if _, err := p.newSealed(img, true); err != nil {
		t.Fatal(err)
	}
	for i := headerSize; i < len(img); i += 7 {
		bad := bytes.Clone(img)
		bad[i] ^= 1
		if _, err := p.newSealed(bad, true); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

// countingReader counts the reads of a cold file.
type countingReader struct {
	r     io.ReaderAt
	reads int
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.r.ReadAt(p, off)
}

// TestColdOneReadPerBlock: a page from cold windows without a cache reads
// each block it needs with one pread and nothing else, in a post table
// and in a set.
func TestColdOneReadPerBlock(t *testing.T) {
	tr, ids, _ := coldTable(t, 3000)
	f := tr.wins[0].body.(*coldWindow)
	cr := &countingReader{r: f.r}
	f.r = cr
	page := slices.Concat(ids[5:20], ids[1500:1510], ids[2990:2995])
	blocks := map[int]bool{}
	for _, id := range page {
		blocks[f.idx.findID(id)] = true
	}
	out, found := make([]Post, len(page)), make([]bool, len(page))
	if err := tr.GetMany(page, out, found); err != nil || slices.Contains(found, false) {
		t.Fatalf("GetMany: %v %v", found, err)
	}
	if len(blocks) < 3 || cr.reads != len(blocks) {
		t.Fatalf("a page over %d blocks read the file %d times", len(blocks), cr.reads)
	}

	s, pairs, _ := coldSet(t, 300, 4)
	sf := s.wins[0].body.(*coldWindow)
	scr := &countingReader{r: sf.r}
	sf.r = scr
	posts := []uint64{pairs[0].p, pairs[1].p, pairs[600].p, pairs[1199].p}
	sblocks := map[int]bool{}
	for _, p := range posts {
		sblocks[sf.idx.findPair(p, 2)] = true
	}
	has := make([]bool, len(posts))
	if err := s.HasMany(2, posts, has); err != nil || slices.Contains(has, false) {
		t.Fatalf("HasMany: %v %v", has, err)
	}
	if len(sblocks) < 3 || scr.reads != len(sblocks) {
		t.Fatalf("a set page over %d blocks read the file %d times", len(sblocks), scr.reads)
	}
}
