package follows

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
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
// merge bounds, so that merges run often, each while changes go on; with
// a larger bound, most passes are scrubs of the users erased (or who
// unfollowed everyone) since the last, each while changes go on, and
// after each pass no byte of the file holds a pair it had to take out.
func TestColdModel(t *testing.T) {
	defer func(g, c int) { minGarbage, coldMergeMin = g, c }(minGarbage, coldMergeMin)
	minGarbage = 64
	for _, bound := range []int{100, 400} {
		coldMergeMin = bound
		for i, sh := range shapes {
			if bound > 100 && sh.viewers*sh.targets < 10_000 {
				continue // too few pairs to pass the bound: no file
			}
			t.Run(fmt.Sprintf("%s/bound=%d", sh.name, bound), func(t *testing.T) {
				scrubs := runModel(t, uint64(i), sh, 20_000, 2000, false, true)
				if bound > 100 && scrubs < 3 {
					t.Fatalf("%d scrubs ran", scrubs)
				}
				if testing.Verbose() {
					t.Logf("%d scrubs", scrubs)
				}
			})
		}
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
	damage(t, s, d)
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

// damage flips a bit of the block of d's record: reads of it fail with
// an error naming the file, and Check too.
func damage(t *testing.T, s *Store, d coldEntry) {
	t.Helper()
	cf := s.cold.file
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

// checkScrubbed reads the store's cold file back byte by byte: every
// byte is the header, a record the directory locates, or zero (a
// superseded record punched out), and no record holds a pair erased
// reports.
func checkScrubbed(t testing.TB, s *Store, erased func(a, b uint64) bool) {
	t.Helper()
	cf := s.cold.file
	if cf == nil {
		return
	}
	raw, err := os.ReadFile(cf.path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != cf.size {
		t.Fatalf("%s: %d bytes, the store says %d", cf.path, len(raw), cf.size)
	}
	live := make([]bool, len(raw))
	for i := range coldHeader {
		live[i] = true
	}
	var e entries
	var cols columns
	for i := range cf.dir {
		d := &cf.dir[i]
		rec := slices.Grow(slices.Clone(raw[d.off():d.off()+int64(d.size())]), 8)
		var blk block
		if err := decodeRecord(rec, d, &blk); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		e.n = 0
		blk.decodeAll(d.a, d.b, &e, &cols)
		for k := range e.n {
			if erased(e.a[k], e.b[k]) {
				t.Fatalf("record %d at byte %d holds the erased pair (%d, %d)", i, d.off(), e.a[k], e.b[k])
			}
		}
		for k := range d.size() {
			live[d.off()+int64(k)] = true
		}
	}
	for i, x := range raw {
		if x != 0 && !live[i] {
			t.Fatalf("%s: byte %d (%#x) is in no record and not zeroed", cf.path, i, x)
		}
	}
}

// pass runs one maintenance pass as the engine does: plan, Run, Finish
// and Collect, returning the job (nil: none was due).
func pass(s *Store) (tier.Work, error) {
	mt := s.Maintainer()
	jobs := mt.PlanWork(time.Time{})
	if len(jobs) == 0 {
		return nil, nil
	}
	err := jobs[0].Run()
	return jobs[0], errors.Join(err, jobs[0].Finish(), mt.Collect(nil))
}

// scrubFixture is a graph in which star, an id whose 8 bytes appear
// nowhere else, is followed by fans of 30,000 viewers and follows 400
// users spread over the whole file, loaded into a cold store; and its
// model.
func scrubFixture(t testing.TB, fans int) (*Store, model) {
	m := model{}
	rng := rand.New(rand.NewPCG(11, 11))
	for v := uint64(1); v <= 30_000; v++ {
		for range 8 {
			m.follow(v, 1+rng.Uint64N(30_000), 0)
		}
		if v <= uint64(fans) {
			m.follow(v*7, scrubStar, 0)
		}
		if v%300 == 0 {
			m.follow(scrubStar, v, 1)
		}
	}
	// Loaded as a start loads a snapshot: the lists in Range's order.
	s := NewCold(t.TempDir())
	for _, v := range slices.Sorted(maps.Keys(m)) {
		ts := slices.Sorted(maps.Keys(m[v]))
		ss := make([]int64, len(ts))
		for i, u := range ts {
			ss[i] = m[v][u]
		}
		if err := s.Load(v, ts, ss); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Loaded(); err != nil {
		t.Fatal(err)
	}
	return s, m
}

const scrubStar = 0x5ca1ab1e_0ddba11

var starBytes = binary.LittleEndian.AppendUint64(nil, scrubStar)

// eraseStar erases the star from s and m as an erasure does, a bounded
// step at a time, and tells the store to scrub it.
func eraseStar(t testing.TB, s *Store, m model) {
	removeUser(t, s, m, scrubStar, 500)
	s.Scrub(scrubStar)
}

func isStarPair(a, b uint64) bool { return a == scrubStar || b == scrubStar }

// compareSome is compare for the large fixtures: Check (both directions
// hold the same edges), the forward lists, and the followers of every
// 97th user and of the star, in pages.
func compareSome(t testing.TB, s *Store, m model) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if got, want := rangeOf(s), m.rangeSeq(); !slices.Equal(got, want) {
		t.Fatal("Range is not the model's")
	}
	want := m.followers()
	for u := uint64(0); u < 30_000; u += 97 {
		checkFollowers(t, s, u, want[u])
	}
	checkFollowers(t, s, scrubStar, want[scrubStar])
}

func checkFollowers(t testing.TB, s *Store, u uint64, want []uint64) {
	t.Helper()
	var got []uint64
	for from := uint64(0); ; {
		page := followers(t, s, u, from, 1000)
		got = append(got, page...)
		if len(page) < 1000 {
			break
		}
		from = page[len(page)-1] + 1
	}
	if !slices.Equal(got, want) || followerCount(t, s, u) != len(want) {
		t.Fatalf("followers of %d: %d, want %d", u, len(got), len(want))
	}
}

// TestColdScrub erases a user followed by 20,000 (some eighty blocks of
// the file) who follows 100 users (a block each, spread over the file):
// the pass after Scrub rewrites those blocks only, in the same file,
// the records that held the user read as zeros and the user's id is in
// no byte of the file, and every read is the model's. With a file system
// that cannot punch holes, zeros are written instead.
func TestColdScrub(t *testing.T) {
	for _, punch := range []bool{true, false} {
		t.Run(fmt.Sprintf("punch=%v", punch), func(t *testing.T) {
			if !punch {
				defer func(p func(*os.File, int64, int64) error) { punchHole = p }(punchHole)
				punchHole = func(*os.File, int64, int64) error { return errors.ErrUnsupported }
			}
			s, m := scrubFixture(t, 20_000)
			defer s.Close()
			cf := s.cold.file
			var held []coldEntry
			var sc coldScratch
			for i := range cf.dir {
				if err := cf.decode(i, &sc); err != nil {
					t.Fatal(err)
				}
				for k := range sc.e.n {
					if isStarPair(sc.e.a[k], sc.e.b[k]) {
						held = append(held, cf.dir[i])
						break
					}
				}
			}
			blocks, size := len(cf.dir), cf.size
			if len(held) < 150 || len(held) > blocks/5 {
				t.Fatalf("the star is in %d blocks of %d", len(held), blocks)
			}
			raw, _ := os.ReadFile(cf.path)
			if !bytes.Contains(raw, starBytes) {
				t.Fatal("the star's id is not in the file before its erasure")
			}
			eraseStar(t, s, m)
			job, err := pass(s)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := job.(*scrubJob); !ok || s.cold.file != cf {
				t.Fatalf("the pass ran %s, want a scrub of %s", job.What(), cf.path)
			}
			// The blocks that held the star, rewritten; the rest untouched.
			if grown := cf.size - size; grown > size/5 || cf.dead < grown {
				t.Fatalf("the scrub appended %d bytes and superseded %d, of a file of %d", grown, cf.dead, size)
			}
			checkScrubbed(t, s, isStarPair)
			raw, _ = os.ReadFile(cf.path)
			if bytes.Contains(raw, starBytes) {
				t.Fatal("the star's id is in the file after the scrub")
			}
			for _, d := range held {
				if slices.ContainsFunc(raw[d.off():d.off()+int64(d.size())], func(x byte) bool { return x != 0 }) {
					t.Fatalf("the record at byte %d that held the star is not zeroed", d.off())
				}
			}
			if s.cold.top.dels.n != 0 || len(s.cold.scrubs) != 0 {
				t.Fatalf("after the scrub: %d dels in the overlay, scrubs %v", s.cold.top.dels.n, s.cold.scrubs)
			}
			compareSome(t, s, m)
			// A second erasure's scrub rewrites a block already moved.
			removeUser(t, s, m, 7, 100)
			s.Scrub(7)
			if _, err := pass(s); err != nil {
				t.Fatal(err)
			}
			checkScrubbed(t, s, func(a, b uint64) bool { return isStarPair(a, b) || a == 7 || b == 7 })
			compareSome(t, s, m)
		})
	}
}

// TestColdScrubFault fails a scrub's write half-way through a record: the
// pass fails, what it appended is truncated, reads are the model's while
// the overlay still holds the removals, and the next pass scrubs.
func TestColdScrubFault(t *testing.T) {
	s, m := scrubFixture(t, 3000)
	defer s.Close()
	eraseStar(t, s, m)
	size := s.cold.file.size
	defer func(w func(*os.File, []byte, int64) (int, error)) { coldWriteAt = w }(coldWriteAt)
	full := errors.New("no space left on device (injected)")
	coldWriteAt = func(f *os.File, p []byte, off int64) (int, error) {
		n, _ := f.WriteAt(p[:len(p)/2], off)
		return n, full
	}
	if job, err := pass(s); !errors.Is(err, full) {
		t.Fatalf("%v: %v", job, err)
	}
	if fi, err := os.Stat(s.cold.file.path); err != nil || fi.Size() != size || s.cold.file.size != size {
		t.Fatalf("after the failed scrub: %v, %v", fi.Size(), err)
	}
	compareSome(t, s, m)
	if !slices.Equal(s.cold.scrubs, []uint64{scrubStar}) {
		t.Fatalf("scrubs %v after a failure", s.cold.scrubs)
	}
	coldWriteAt = (*os.File).WriteAt
	if job, err := pass(s); err != nil || job == nil {
		t.Fatalf("retry: %v %v", job, err)
	}
	checkScrubbed(t, s, isStarPair)
	compareSome(t, s, m)
}

// TestColdScrubDamaged flips a byte of a record a scrub appended: reads
// of it fail naming the file, as of any record.
func TestColdScrubDamaged(t *testing.T) {
	s, m := scrubFixture(t, 3000)
	defer s.Close()
	size := s.cold.file.size
	eraseStar(t, s, m)
	if _, err := pass(s); err != nil {
		t.Fatal(err)
	}
	cf := s.cold.file
	i := slices.IndexFunc(cf.dir, func(d coldEntry) bool { return d.off() >= size })
	if i < 0 {
		t.Fatal("no record appended")
	}
	damage(t, s, cf.dir[i])
}

// TestColdRecordLimits: the widest block's record fits a directory
// entry's length field.
func TestColdRecordLimits(t *testing.T) {
	var e entries
	for i := range maxBlock {
		e.a[i], e.b[i] = uint64(i)<<56|uint64(i), uint64(i)<<57
	}
	e.n = maxBlock
	var enc encoder
	if rec := appendRecord(nil, &enc, &e); len(rec) > maxColdRecord {
		t.Fatalf("a record of %d bytes", len(rec))
	}
	if _, err := coldLoc("f", maxColdFile, 10, 1); err == nil {
		t.Fatal("a record past the file limit")
	}
}

// TestPairsRemoveAll removes sorted lists of pairs, some not in the set,
// from sets of many blocks, against a map.
func TestPairsRemoveAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	for round := range 200 {
		var p pairs
		in := map[pair]bool{}
		for range rng.IntN(5000) {
			x := pair{rng.Uint64N(20), rng.Uint64N(400)}
			p.insert(x.a, x.b, 0)
			in[x] = true
		}
		var gone, want []pair
		for a := range uint64(21) {
			for b := range uint64(401) {
				if rng.IntN(1+round%7) == 0 {
					gone = append(gone, pair{a, b})
					if !in[pair{a, b}] {
						want = append(want, pair{a, b})
					}
					delete(in, pair{a, b})
				}
			}
		}
		if missing := p.removeAll(gone, nil); !slices.Equal(missing, want) {
			t.Fatalf("round %d: missing %d pairs, want %d", round, len(missing), len(want))
		}
		if err := p.check(); err != nil {
			t.Fatal(err)
		}
		if p.n != len(in) {
			t.Fatalf("round %d: %d pairs, want %d", round, p.n, len(in))
		}
		for cur := p.cursor(); cur.valid(); cur.i++ {
			if !in[pair{cur.e.a[cur.i], cur.e.b[cur.i]}] {
				t.Fatalf("round %d: (%d, %d) left", round, cur.e.a[cur.i], cur.e.b[cur.i])
			}
		}
	}
}

// TestColdScrubFollowedAgain follows a user the scrub takes out again
// while its Run runs: the pair leaves the file but stays in the store.
func TestColdScrubFollowedAgain(t *testing.T) {
	s, m := scrubFixture(t, 3000)
	defer s.Close()
	eraseStar(t, s, m)
	mt := s.Maintainer()
	job := mt.PlanWork(time.Time{})[0]
	done := make(chan error)
	go func() { done <- job.Run() }()
	for _, v := range []uint64{7, 70, 700} {
		s.Follow(v, scrubStar, 5)
		m.follow(v, scrubStar, 5)
	}
	s.Unfollow(70, scrubStar)
	delete(m[70], scrubStar)
	if err := errors.Join(<-done, job.Finish(), mt.Collect(nil)); err != nil {
		t.Fatal(err)
	}
	if _, ok := job.(*scrubJob); !ok {
		t.Fatalf("the pass ran %s", job.What())
	}
	checkScrubbed(t, s, isStarPair)
	compareSome(t, s, m)
	if got := followers(t, s, scrubStar, 0, 10); !slices.Equal(got, []uint64{7, 700}) {
		t.Fatalf("the star's followers: %v", got)
	}
}
