package tier

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/snowflake"
)

// coldSet returns a set whose one window (n posts, each liked by users 1
// to likers) is in a file, with no block cache, its pairs and the file's
// path.
func coldSet(t *testing.T, n, likers int) (*Set, []upair, string) {
	t.Helper()
	dir := t.TempDir()
	opts := setOpts(dir)
	opts.OpenAge, opts.ColdAge, opts.ColdCacheBytes = -1, time.Nanosecond, -1
	s := newTestSet(t, opts, 16)
	var pairs []upair
	for i := range n {
		post := snowflake.Make(testEpoch.UnixMilli()+int64(i%testWindow), uint64(i/testWindow), 0)
		for u := range likers {
			if _, err := s.Add(uint64(u+1), post); err != nil {
				t.Fatal(err)
			}
			pairs = append(pairs, upair{uint64(u + 1), post})
		}
	}
	if err := s.Maintain(testEpoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	return s, pairs, filepath.Join(dir, files[0])
}

// TestSetCorruptColdBlock: a damaged block is an error naming the file
// and offset from Has, HasMany, Add, Remove, Range, VerifyFiles and a job
// that would fold it; a write that needs it stores nothing; the other
// blocks still read; nothing reads as absent.
func TestSetCorruptColdBlock(t *testing.T) {
	s, pairs, path := coldSet(t, 200, 3)
	if err := s.VerifyFiles(); err != nil {
		t.Fatal(err)
	}
	f := s.wins[0].body.(*coldWindow)
	bp, bu := f.idx.firstPair(2)
	off, end := f.idx.span(2)
	np, nu := f.idx.firstPair(3)
	flipByte(t, path, int64(off+(end-off)/2))
	if err := s.VerifyFiles(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifyFiles over a damaged block: %v", err)
	}
	var bad, good upair
	for _, q := range pairs {
		in := comparePairs(pair{post: q.p, user: q.u}, pair{post: bp, user: bu}) >= 0 && comparePairs(pair{post: q.p, user: q.u}, pair{post: np, user: nu}) < 0
		if in {
			bad = q
		} else if comparePairs(pair{post: q.p, user: q.u}, pair{post: np, user: nu}) >= 0 {
			good = q
		}
	}
	has, err := s.Has(bad.u, bad.p)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != filepath.Base(path) || ce.Offset != int64(off) || has {
		t.Fatalf("Has in a damaged block: %v %v", has, err)
	}
	if has, err := s.Has(good.u, good.p); err != nil || !has {
		t.Fatalf("Has in an intact block: %v %v", has, err)
	}
	out := make([]bool, 3)
	if err := s.HasMany(bad.u, []uint64{good.p, bad.p, pairs[0].p}, out); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("HasMany: %v", err)
	}
	if err := s.Range(func(uint64, uint64) bool { return true }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Range over a damaged block: %v", err)
	}
	n := s.Len()
	if _, err := s.Remove(bad.u, bad.p); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Remove in a damaged block: %v", err)
	}
	if _, err := s.Add(bad.u+100, bad.p); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Add into a damaged block's range: %v", err)
	}
	if s.Len() != n || s.wins[0].delta != nil {
		t.Fatalf("a failed write stored something: Len %d, was %d; delta %v", s.Len(), n, s.wins[0].delta)
	}
	// A compaction that must read the block fails and leaves the window
	// and its delta as they were.
	last := pairs[len(pairs)-1].p
	for i := range 100 {
		if _, err := s.Add(7, last+uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Maintain(testEpoch.Add(time.Hour)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Maintain over a damaged file: %v", err)
	}
	if has, err := s.Has(7, last+50); err != nil || !has {
		t.Fatalf("delta after a failed job: %v %v", has, err)
	}
	if len(s.Files()) != 1 || s.jobs != 0 {
		t.Fatalf("after a failed job: files %v, %d jobs", s.Files(), s.jobs)
	}
	s.Close()
}

// TestSetTruncatedColdFile: a file cut short is refused when a snapshot
// names it, and a block read past its end is an error, not absence.
func TestSetTruncatedColdFile(t *testing.T) {
	s, pairs, path := coldSet(t, 300, 2)
	var img bytes.Buffer
	if _, err := s.WriteTo(&img); err != nil {
		t.Fatal(err)
	}
	// Cut the file in the middle of its blocks.
	f := s.wins[0].body.(*coldWindow)
	off, _ := f.idx.span(f.idx.blocks / 2)
	if err := os.Truncate(path, int64(off)); err != nil {
		t.Fatal(err)
	}
	q := pairs[len(pairs)-1]
	if _, err := s.Has(q.u, q.p); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Has past the end of a truncated file: %v", err)
	}
	again := newTestSet(t, s.opts, 16)
	if err := again.Load(bytes.NewReader(img.Bytes())); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load naming a truncated file: %v", err)
	}
	if again.Len() != 0 {
		t.Fatal("a refused Load changed the set")
	}
	s.Close()
}

// TestSetDamagedImage: every single-byte change and every truncation of
// a set's image is refused (the checksums), and a refused Load leaves the
// set as it was.
func TestSetDamagedImage(t *testing.T) {
	opts := setOpts("")
	opts.OpenAge = 2 * time.Second
	s := newTestSet(t, opts, 8)
	for i := range 200 {
		s.Add(uint64(i%7), snowflake.Make(testEpoch.UnixMilli()+int64(i*20), 0, 0))
	}
	s.Maintain(testEpoch.Add(5 * time.Second))
	s.Remove(3, snowflake.Make(testEpoch.UnixMilli()+3*20, 0, 0))
	s.Add(9, snowflake.Make(testEpoch.UnixMilli()+1, 0, 0))
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	img := buf.Bytes()
	target := newTestSet(t, opts, 8)
	target.Add(1, 1)
	for i := 0; i < len(img); i += max(1, len(img)/300) {
		bad := bytes.Clone(img)
		bad[i] ^= 0x10
		if err := target.Load(bytes.NewReader(bad)); err == nil {
			t.Fatalf("byte %d changed: Load accepted the image", i)
		}
		if err := target.Load(io.LimitReader(bytes.NewReader(img), int64(i))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d: %v", i, err)
		}
	}
	if target.Len() != 1 {
		t.Fatalf("refused Loads changed the set: Len %d", target.Len())
	}
	if err := target.Load(bytes.NewReader(img)); err != nil || target.Len() != s.Len() {
		t.Fatalf("the intact image: %v, Len %d want %d", err, target.Len(), s.Len())
	}
	// Another set's image (favorites) is refused.
	favs, _ := NewSet("FAVS", opts)
	if err := favs.Load(bytes.NewReader(img)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a likes image loaded as favorites: %v", err)
	}
}
