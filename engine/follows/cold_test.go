package follows

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/tier"
)

// merging is a cold store's merge under way in a test: Run on a goroutine
// of its own while the test changes the store.
type merging struct {
	job  tier.Work
	done chan error
}

// step plans a merge when none is under way (m nil), starting its Run,
// or finishes the one under way, as the engine's maintenance loop does:
// plan and finish under the write lock (here: on the test's goroutine),
// Run with none.
func (m *merging) step(t testing.TB, s *Store) *merging {
	t.Helper()
	mt := s.Maintainer()
	if m == nil {
		jobs := mt.PlanWork(time.Time{})
		if len(jobs) == 0 {
			return nil
		}
		m = &merging{job: jobs[0], done: make(chan error, 1)}
		go func() { m.done <- m.job.Run() }()
		return m
	}
	if err := cmpOr(<-m.done, m.job.Finish()); err != nil {
		t.Fatal(err)
	}
	before := mt.Files()
	if err := mt.Collect(nil); err != nil {
		t.Fatal(err)
	}
	// The directory holds the current file alone.
	files, _ := filepath.Glob(filepath.Join(s.cold.dir, "followers-*"))
	if !slices.Equal(files, before) || len(files) != 1 {
		t.Fatalf("after a merge: files %v, the store uses %v", files, before)
	}
	return nil
}

func cmpOr(errs ...error) error { return errors.Join(errs...) }

// TestColdModel is TestModel with the reverse direction cold: small
// merge bounds, so that merges run often, each while changes go on.
func TestColdModel(t *testing.T) {
	defer func(g, c int) { minGarbage, coldMergeMin = g, c }(minGarbage, coldMergeMin)
	minGarbage, coldMergeMin = 64, 100
	for i, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			runModel(t, uint64(i), sh, 20_000, 2000, false, true)
		})
	}
}

// TestColdErasure erases a user followed by many, a bounded step at a
// time as the eraser does (Followers, then RemoveUser), while merges run:
// every follower is found once, and the store ends as the model.
func TestColdErasure(t *testing.T) {
	defer func(c int) { coldMergeMin = c }(coldMergeMin)
	coldMergeMin = 500
	s := NewCold(t.TempDir())
	defer s.Close()
	m := model{}
	const star, fans = 1 << 40, 20_000
	for v := uint64(1); v <= fans; v++ {
		s.Follow(v, star, int64(v))
		m.follow(v, star, int64(v))
		if v%3 == 0 {
			s.Follow(v, v+1, 0)
			m.follow(v, v+1, 0)
		}
	}
	var merge *merging
	for merge = merge.step(t, s); merge != nil; merge = merge.step(t, s) {
	}
	if s.cold.file == nil || s.cold.file.n < fans {
		t.Fatal("the followers are not in the file")
	}
	seen := map[uint64]bool{}
	for steps := 0; ; steps++ {
		if steps%4 == 0 {
			merge = merge.step(t, s)
		}
		page := followers(t, s, star, 0, 250)
		for _, f := range page {
			if seen[f] {
				t.Fatalf("follower %d found twice", f)
			}
			seen[f] = true
			if !s.Unfollow(f, star) {
				t.Fatalf("Unfollow(%d, star) = false", f)
			}
			delete(m[f], star)
		}
		// Follows and unfollows of others go on meanwhile.
		s.Follow(uint64(steps)+fans+10, star+1, 1)
		m.follow(uint64(steps)+fans+10, star+1, 1)
		if len(page) < 250 {
			break
		}
	}
	for merge != nil {
		merge = merge.step(t, s)
	}
	if len(seen) != fans {
		t.Fatalf("found %d followers, want %d", len(seen), fans)
	}
	removeUser(t, s, m, star+1, 7)
	compare(t, s, m)
}

// TestColdDamaged flips a byte of a cold file's record: reads of that
// block fail with an error naming the file, Check too, and no read
// returns wrong followers.
func TestColdDamaged(t *testing.T) {
	dir := t.TempDir()
	src := New()
	for v := uint64(1); v <= 5000; v++ {
		src.Follow(v, v%7, 0)
	}
	s := NewCold(dir)
	defer s.Close()
	loadFrom(t, s, src)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	cf := s.cold.file
	d := cf.dir[len(cf.dir)/2]
	b := []byte{0}
	if _, err := cf.f.ReadAt(b, d.off()+recHeader+3); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := cf.f.WriteAt(b, d.off()+recHeader+3); err != nil {
		t.Fatal(err)
	}
	_, err := s.Followers(d.a, d.b, 10, nil)
	if err == nil || !errors.Is(err, errCold) || !strings.Contains(err.Error(), cf.path) {
		t.Fatalf("Followers over a damaged block: %v", err)
	}
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), cf.path) {
		t.Fatalf("Check of a damaged file: %v", err)
	}
	// RemoveUser cannot read the followers: it removes none, and says
	// it is not done.
	n := s.Len()
	removedFollowers := 0
	if s.RemoveUser(d.a, 1000, func(viewer, target uint64) {
		if target == d.a && viewer != d.a { // not its follow of itself
			removedFollowers++
		}
	}) || removedFollowers != 0 || s.Len() < n-1 {
		t.Fatalf("RemoveUser over a damaged block removed %d followers", removedFollowers)
	}
	// A block before the damaged one reads as before.
	if fs := followers(t, s, 0, 0, 3); !slices.Equal(fs, []uint64{7, 14, 21}) {
		t.Fatalf("Followers(0) = %v", fs)
	}
}

// TestColdRestart is a restart as the engine makes one: the forward lists
// ranged (a snapshot) and loaded into a new cold store, whose file
// replaces nothing of the old store's; then changes and a merge.
func TestColdRestart(t *testing.T) {
	defer func(c int) { coldMergeMin = c }(coldMergeMin)
	coldMergeMin = 100
	dir := t.TempDir()
	s := NewCold(dir)
	m := model{}
	for v := uint64(0); v < 3000; v++ {
		s.Follow(v, v*v%101, 3)
		m.follow(v, v*v%101, 3)
	}
	var merge *merging
	for merge = merge.step(t, s); merge != nil; merge = merge.step(t, s) {
	}
	l := NewCold(dir)
	loadFrom(t, l, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	compare(t, l, m)
	for v := uint64(0); v < 3000; v += 2 {
		l.Unfollow(v, v*v%101)
		delete(m[v], v*v%101)
	}
	for merge = merge.step(t, l); merge != nil; merge = merge.step(t, l) {
	}
	compare(t, l, m)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("files left after Close: %v", files)
	}
}

// FuzzColdRecord feeds decodeRecord damaged records: it must return an
// error or a block that decodes, never panic.
func FuzzColdRecord(f *testing.F) {
	var enc encoder
	var e entries
	for i := range 40 {
		e.a[i], e.b[i] = uint64(i/7), uint64(i*i)
	}
	e.n = 40
	buf := enc.encode(&e, 0, e.n)
	rec := make([]byte, recHeader, recHeader+len(buf))
	rec = append(rec, buf...)
	f.Add(rec, uint8(39))
	f.Fuzz(func(t *testing.T, rec []byte, n uint8) {
		d := coldEntry{a: 0, b: 0, loc: uint64(n)}
		if len(rec) >= recHeader {
			// Valid headers, so that the fuzzer reaches the block's parse.
			copy(rec[8:], make([]byte, 16))
			rec[24] = n
			put32(rec[4:], uint32(len(rec)-recHeader))
			put32(rec, crcOf(rec[4:]))
		}
		rec = slices.Grow(rec, 8)
		var blk block
		if err := decodeRecord(rec, &d, &blk); err != nil {
			return
		}
		var e entries
		var sc columns
		blk.decodeAll(d.a, d.b, &e, &sc)
	})
}
