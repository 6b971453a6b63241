package follows

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tally-dev/tally/engine/table"
	"github.com/tally-dev/tally/engine/tier"
)

// The cold reverse direction. Who follows a user is read by an erasure
// and a consistency check, almost never by a request, so a store made by
// NewCold keeps it in a file (coldfile.go) with only the file's directory
// in memory, a small fraction of a byte a pair, and an overlay of the
// pairs added and removed since the file was written:
//
//	reverse = ((file ∪ lower.adds) − lower.dels ∪ top.adds) − top.dels
//
// Changes go to the top overlay: a pair added goes to top.adds unless it
// is in top.dels (a pair removed and added again), a pair removed comes
// out of top.adds or goes to top.dels. The forward direction says whether
// a pair is there, so a change never reads the file. Each overlay's adds
// are not in what lies under it and its dels are, so counts add up
// (coldRev.n) and a read is a merge of sorted streams.
//
// When the top overlay passes a bound (a fraction of the file's pairs), a
// merge is planned under the write lock: the top overlay becomes the lower
// one, frozen, and a fresh top takes the changes. The merge runs with no
// lock, streaming the file and the lower overlay into a new file, and is
// finished under the write lock: the new file replaces the old and the
// lower overlay, which it holds. The old file is closed and deleted at the
// next Collect: a reader holds the read lock, so none is reading it by
// then. A merge that fails leaves the lower overlay in place and is
// planned again. The file is derived data: a start rebuilds it from the
// forward lists (Loaded), and it needs no crash safety beyond that.
//
// An erasure must leave no file holding the user's pairs, and a merge
// rewrites the whole file, so the erasure's Scrub plans a scrub instead
// (scrub.go): it rewrites only the blocks that hold a pair of the users
// scrubbed that the top overlay removes, appending the new records at
// the file's end, and the superseded records' bytes are punched out at
// the next Collect. Its cost is those blocks, not the file: one user's
// followers' run and a block for each user they followed. The space it
// leaves behind counts toward the next merge (coldFile.dead), which is
// due once a quarter of the file is dead: superseded records take no
// disk once punched, but the appended ones are out of key order, which
// a merge restores.
type coldRev struct {
	dir  string
	id   uint64 // names this store's files apart from another's
	gen  int
	file *coldFile // nil: no pairs written yet

	lower, top overlay
	job        tier.Work // the merge or scrub under way, or nil
	retired    []*coldFile
	// scrubs are the users whose removed pairs must leave the file at
	// the next pass (Store.Scrub).
	scrubs []uint64
	// punch is the superseded records Collect destroys.
	punch []extent

	scratch sync.Pool // *coldScratch, for readers under the read lock
}

// overlay is pairs added and removed over what lies under them; lower's
// are nil when no merge is planned.
type overlay struct{ adds, dels *pairs }

func newOverlay() overlay { return overlay{adds: &pairs{}, dels: &pairs{}} }

func (o overlay) n() int {
	if o.adds == nil {
		return 0
	}
	return o.adds.n + o.dels.n
}

var coldIDs atomic.Uint64

// coldMergeMin is the overlay that triggers a merge in a small graph; a
// large one merges when the overlay passes a 32nd of the file's pairs, so
// that the overlay costs a fraction of a byte a pair and a merge's cost,
// O(pairs), is spread over many changes. A variable so that tests merge
// often.
var coldMergeMin = 1 << 16

// NewCold returns an empty store whose reverse direction lives in files
// in dir (which must exist), as the comment above says. A start must use
// a directory no other store writes; files of earlier runs are the
// caller's to delete (the embedded engine clears its cold directory at
// Open).
func NewCold(dir string) *Store {
	s := New()
	s.cold = &coldRev{dir: dir, id: coldIDs.Add(1), top: newOverlay()}
	return s
}

func (c *coldRev) path(gen int) string {
	return filepath.Join(c.dir, fmt.Sprintf("followers-%d-%06d.rev", c.id, gen))
}

func (c *coldRev) getScratch() *coldScratch {
	if sc, ok := c.scratch.Get().(*coldScratch); ok {
		return sc
	}
	return new(coldScratch)
}

// n is the number of pairs.
func (c *coldRev) n() int {
	n := c.top.adds.n - c.top.dels.n
	if c.file != nil {
		n += c.file.n
	}
	if c.lower.adds != nil {
		n += c.lower.adds.n - c.lower.dels.n
	}
	return n
}

func (c *coldRev) insert(a, b uint64) {
	if removed, _ := c.top.dels.remove(a, b); !removed {
		c.top.adds.insert(a, b, 0)
	}
}

func (c *coldRev) remove(a, b uint64) {
	if removed, _ := c.top.adds.remove(a, b); !removed {
		c.top.dels.insert(a, b, 0)
	}
}

// runLen returns the number of pairs of a: the file's counted as
// pairs.runLen counts them, plus and minus the overlays'.
func (c *coldRev) runLen(a uint64) (int, error) {
	total := c.top.adds.runLen(a) - c.top.dels.runLen(a)
	if c.lower.adds != nil {
		total += c.lower.adds.runLen(a) - c.lower.dels.runLen(a)
	}
	cf := c.file
	if cf == nil || len(cf.dir) == 0 {
		return total, nil
	}
	sc := c.getScratch()
	defer c.scratch.Put(sc)
	for i := cf.seek(a, 0); i < len(cf.dir); i++ {
		d := &cf.dir[i]
		if d.a > a {
			break
		}
		whole := i+1 < len(cf.dir) && cf.dir[i+1].a == a
		if whole && d.a == a {
			total += d.n()
			continue
		}
		var blk block
		if err := cf.read(i, sc, &blk); err != nil {
			return 0, err
		}
		if j, _, length := blk.find(d.a, a); j >= 0 {
			total += length
		}
		if !whole {
			break
		}
	}
	return total, nil
}

// appendRun appends a's pairs' b from from on to bs, until bs holds max
// (max < 0: no limit).
func (c *coldRev) appendRun(a, from uint64, max int, bs []uint64) ([]uint64, error) {
	sc := c.getScratch()
	defer c.scratch.Put(sc)
	var fi fileRun
	if c.file != nil {
		fi = fileRun{cf: c.file, sc: sc}
		fi.start(a, from)
	}
	var s stream = &fi
	if c.lower.adds != nil {
		s = union(minus(s, runOf(c.lower.dels, a, from)), runOf(c.lower.adds, a, from))
	}
	s = minus(union(s, runOf(c.top.adds, a, from)), runOf(c.top.dels, a, from))
	for max < 0 || len(bs) < max {
		_, b, ok := s.next()
		if !ok {
			break
		}
		bs = append(bs, b)
	}
	return bs, fi.err
}

// has reports whether a has a pair.
func (c *coldRev) has(a uint64) (bool, error) {
	var one [1]uint64
	bs, err := c.appendRun(a, 0, 1, one[:0])
	return len(bs) > 0, err
}

// takeRun removes up to max of a's pairs, the lowest b first, and
// appends their b to bs.
func (c *coldRev) takeRun(a uint64, max int, bs []uint64) ([]uint64, error) {
	k := len(bs)
	bs, err := c.appendRun(a, 0, k+max, bs)
	if err != nil {
		return bs[:k], err
	}
	for _, b := range bs[k:] {
		c.remove(a, b)
	}
	return bs, nil
}

func (c *coldRev) memoryBytes() int {
	n := c.top.adds.memoryBytes() + c.top.dels.memoryBytes() + int(unsafe.Sizeof(*c))
	if c.lower.adds != nil {
		n += c.lower.adds.memoryBytes() + c.lower.dels.memoryBytes()
	}
	if c.file != nil {
		n += c.file.memoryBytes()
	}
	return n
}

func (c *coldRev) compact() {
	c.top.adds.compact()
	c.top.dels.compact()
}

// fileHas reports whether the file holds (a, b).
func (c *coldRev) fileHas(a, b uint64, sc *coldScratch) (bool, error) {
	cf := c.file
	if cf == nil || len(cf.dir) == 0 {
		return false, nil
	}
	fi := fileRun{cf: cf, sc: sc}
	fi.start(a, b)
	x, y, ok := fi.next()
	return ok && x == a && y == b, fi.err
}

// check verifies the file's records and the overlays, and returns the
// pairs and the sum of table.HashPair(b, a) over them (Store.Check).
func (c *coldRev) check() (n int, sum uint64, err error) {
	sc := new(coldScratch)
	if cf := c.file; cf != nil {
		var enc encoder
		var lastA, lastB uint64
		for i := range cf.dir {
			var blk block
			if err := cf.read(i, sc, &blk); err != nil {
				return 0, 0, err
			}
			d := &cf.dir[i]
			if i > 0 && !less(lastA, lastB, d.a, d.b) {
				return 0, 0, fmt.Errorf("%s: record %d starts at (%d, %d), not above (%d, %d)", cf.path, i, d.a, d.b, lastA, lastB)
			}
			sc.e.n = 0
			if err := checkBlock(&blk, d.a, d.b, &sc.e, &enc); err != nil {
				return 0, 0, fmt.Errorf("%s: record %d: %w", cf.path, i, err)
			}
			for k := range sc.e.n {
				if sc.e.v[k] != 0 {
					return 0, 0, fmt.Errorf("%s: reverse edge %d <- %d holds %d", cf.path, sc.e.a[k], sc.e.b[k], sc.e.v[k])
				}
				sum += table.HashPair(sc.e.b[k], sc.e.a[k])
			}
			lastA, lastB = sc.e.a[sc.e.n-1], sc.e.b[sc.e.n-1]
			n += sc.e.n
		}
		if n != cf.n {
			return 0, 0, fmt.Errorf("%s: %d pairs, counted %d", cf.path, cf.n, n)
		}
		if err := cf.checkLayout(); err != nil {
			return 0, 0, err
		}
	}
	// Each overlay's adds must not be under it, its dels must.
	under := func(a, b uint64, lower bool) (bool, error) {
		if !lower && c.lower.adds != nil {
			if c.lower.dels.contains(a, b) {
				return false, nil
			}
			if c.lower.adds.contains(a, b) {
				return true, nil
			}
		}
		return c.fileHas(a, b, sc)
	}
	for _, o := range []struct {
		overlay
		lower bool
	}{{c.lower, true}, {c.top, false}} {
		if o.adds == nil {
			continue
		}
		for _, side := range []struct {
			p    *pairs
			want bool
			sign int
		}{{o.adds, false, 1}, {o.dels, true, -1}} {
			if err := side.p.check(); err != nil {
				return 0, 0, fmt.Errorf("overlay: %w", err)
			}
			for cur := side.p.cursor(); cur.valid(); cur.i++ {
				a, b := cur.e.a[cur.i], cur.e.b[cur.i]
				there, err := under(a, b, o.lower)
				if err != nil {
					return 0, 0, err
				}
				if there != side.want {
					return 0, 0, fmt.Errorf("overlay: pair (%d, %d) added over itself or removed where it is not", a, b)
				}
				sum += uint64(side.sign) * table.HashPair(b, a)
			}
			n += side.sign * side.p.n
		}
	}
	return n, sum, nil
}

// close closes the files (Store.Close).
func (c *coldRev) close() error {
	var errs []error
	for _, cf := range append(c.retired, c.file) {
		if cf != nil {
			errs = append(errs, cf.remove())
		}
	}
	c.retired, c.file, c.punch = nil, nil, nil
	return errors.Join(errs...)
}

// build writes runs, the whole reverse direction, as the file of a new
// generation (a load's merge, load.go).
func (c *coldRev) build(runs []*pairs) error {
	c.gen++
	cw, err := createCold(c.path(c.gen))
	if err != nil {
		return err
	}
	mergeRuns(runs, cw)
	cf, err := cw.finish()
	if err != nil {
		return err
	}
	if c.file != nil {
		c.retired = append(c.retired, c.file)
	}
	c.file = cf
	return nil
}

// mergeJob writes the file and the lower overlay as a new file.
type mergeJob struct {
	c     *coldRev
	from  *coldFile
	lower overlay
	path  string
	out   *coldFile
	err   error
}

// plan returns the job due, or nil: a merge when the top overlay passes
// its bound, when a quarter of the file is dead or when the last merge
// failed; else a scrub, when users wait for one (Store.Scrub).
func (c *coldRev) plan() tier.Work {
	if c.job != nil {
		return nil
	}
	if c.lower.adds == nil {
		bound := coldMergeMin
		dead := false
		if c.file != nil {
			bound = max(bound, c.file.n/32)
			dead = c.file.dead*4 > c.file.size
		}
		if c.top.n() < bound && !dead {
			if j := c.planScrub(); j != nil {
				return j
			}
			return nil
		}
		c.lower, c.top = c.top, newOverlay()
		// The merge leaves out every pair the overlay removes, the
		// scrubbed users' among them. (A merge planned again after a
		// failure does not: top has had changes since.)
		c.scrubs = c.scrubs[:0]
	}
	c.gen++
	job := &mergeJob{c: c, from: c.file, lower: c.lower, path: c.path(c.gen)}
	c.job = job
	return job
}

// Run writes the merge with no lock: it reads only the old file and the
// lower overlay, which nothing changes.
func (j *mergeJob) Run() error {
	cw, err := createCold(j.path)
	if err != nil {
		j.err = err
		return err
	}
	var s stream = &fileAll{cf: j.from, sc: new(coldScratch)}
	s = union(minus(s, all(j.lower.dels)), all(j.lower.adds))
	for {
		a, b, ok := s.next()
		if !ok {
			break
		}
		cw.add(a, b, 0)
	}
	if err := s.(*unionStream).err(); err != nil {
		cw.abort()
		j.err = err
		return err
	}
	j.out, j.err = cw.finish()
	return j.err
}

// Finish installs the new file under the write lock; the old one waits
// for Collect.
func (j *mergeJob) Finish() error {
	c := j.c
	c.job = nil
	if j.err != nil {
		return j.err
	}
	if c.file != nil {
		c.retired = append(c.retired, c.file)
	}
	c.file, c.lower = j.out, overlay{}
	return nil
}

func (j *mergeJob) What() string { return "merge of " + filepath.Base(j.path) }

// maintainer adapts a Store to tier.Maintainer, for the engine's
// maintenance loop.
type maintainer struct{ s *Store }

// Maintainer returns what a maintenance loop drives: the cold reverse
// direction's merges (none for a store New made). Its methods are called
// under the write lock, but for the jobs' Run.
func (s *Store) Maintainer() tier.Maintainer { return maintainer{s} }

func (m maintainer) PlanWork(time.Time) []tier.Work {
	c := m.s.cold
	if c == nil || m.s.load != nil {
		return nil
	}
	if j := c.plan(); j != nil {
		return []tier.Work{j}
	}
	return nil
}

// Collect destroys the records scrubs superseded and closes and deletes
// the files merges replaced: a reader holds the read lock, so none is
// reading them by then. keep is unused: snapshots never name these
// files. A record it could not destroy is tried again at the next.
func (m maintainer) Collect([]string) error {
	c := m.s.cold
	if c == nil {
		return nil
	}
	var errs []error
	// Adjacent records (a run of a user's followers) go in one call.
	slices.SortFunc(c.punch, func(x, y extent) int { return cmp.Compare(x.off, y.off) })
	left := c.punch[:0]
	for i := 0; i < len(c.punch); {
		x := c.punch[i]
		for i++; i < len(c.punch) && c.punch[i].off == x.off+x.size && c.punch[i].cf == x.cf; i++ {
			x.size += c.punch[i].size
		}
		if x.cf != c.file {
			continue // retired: deleted below
		}
		if err := x.cf.destroy(x.off, x.size); err != nil {
			errs = append(errs, err)
			left = append(left, x)
		}
	}
	c.punch = left
	for _, cf := range c.retired {
		errs = append(errs, cf.remove())
	}
	c.retired = nil
	return errors.Join(errs...)
}

func (m maintainer) Files() []string {
	if c := m.s.cold; c != nil && c.file != nil {
		return []string{c.file.path}
	}
	return nil
}

func (m maintainer) MemoryBytes() int64 { return int64(m.s.MemoryBytes()) }

// Scrub makes the next PlanWork take user's removed edges out of the
// file's bytes: an erasure calls it once the user's edges are gone, so
// that no file keeps them past the next maintenance pass (and its
// Collect). The pass rewrites the blocks that held them, not the file
// (scrub.go). A store New made ignores it.
func (s *Store) Scrub(user uint64) {
	if c := s.cold; c != nil && !slices.Contains(c.scrubs, user) {
		c.scrubs = append(c.scrubs, user)
	}
}

// Close closes and deletes the cold files, if any; the store must not be
// used after.
func (s *Store) Close() error {
	if s.cold == nil {
		return nil
	}
	return s.cold.close()
}

// The streams a cold read merges: pairs in increasing order.
type stream interface {
	next() (a, b uint64, ok bool)
}

// peeked is a stream with its next pair read ahead.
type peeked struct {
	s      stream
	a, b   uint64
	ok     bool
	primed bool
}

func (p *peeked) peek() bool {
	if !p.primed {
		p.a, p.b, p.ok = p.s.next()
		p.primed = true
	}
	return p.ok
}

func (p *peeked) take() (uint64, uint64) {
	p.primed = false
	return p.a, p.b
}

// unionStream yields the pairs of two streams with none in common;
// minusStream (dels set) those of the first not in the second, which the
// first holds all of.
type unionStream struct {
	x, y peeked
	dels bool
}

func union(x, y stream) stream { return &unionStream{x: peeked{s: x}, y: peeked{s: y}} }
func minus(x, d stream) stream { return &unionStream{x: peeked{s: x}, y: peeked{s: d}, dels: true} }

func (u *unionStream) next() (uint64, uint64, bool) {
	for {
		if !u.x.peek() {
			if u.dels || !u.y.peek() {
				return 0, 0, false
			}
			a, b := u.y.take()
			return a, b, true
		}
		if !u.y.peek() || less(u.x.a, u.x.b, u.y.a, u.y.b) {
			a, b := u.x.take()
			return a, b, true
		}
		if u.dels {
			// y's pair is x's (dels are all in x): skip both.
			u.x.take()
			u.y.take()
			continue
		}
		a, b := u.y.take()
		return a, b, true
	}
}

// err returns the first error of a file stream under u.
func (u *unionStream) err() error {
	for _, s := range []stream{u.x.s, u.y.s} {
		switch s := s.(type) {
		case *unionStream:
			if err := s.err(); err != nil {
				return err
			}
		case *fileAll:
			if s.err != nil {
				return s.err
			}
		}
	}
	return nil
}

// runStream yields a's pairs of an in-memory set from from on, a page at
// a time.
type runStream struct {
	p     *pairs
	a     uint64
	from  uint64
	page  []uint64
	k     int
	done  bool
	first [64]uint64
}

func runOf(p *pairs, a, from uint64) stream {
	r := &runStream{p: p, a: a, from: from}
	r.page = r.first[:0]
	return r
}

func (r *runStream) next() (uint64, uint64, bool) {
	if r.k == len(r.page) {
		if r.done || r.p.n == 0 {
			return 0, 0, false
		}
		r.page, _ = r.p.appendRun(r.a, r.from, len(r.first), r.page[:0], nil, false)
		r.k = 0
		if len(r.page) < len(r.first) || r.page[len(r.page)-1] == math.MaxUint64 {
			r.done = true
		}
		if len(r.page) == 0 {
			return 0, 0, false
		}
		r.from = r.page[len(r.page)-1] + 1
	}
	r.k++
	return r.a, r.page[r.k-1], true
}

// allStream yields every pair of an in-memory set.
type allStream struct{ c *cursor }

func all(p *pairs) stream { return &allStream{c: p.cursor()} }

func (s *allStream) next() (uint64, uint64, bool) {
	if !s.c.valid() {
		return 0, 0, false
	}
	s.c.i++
	return s.c.e.a[s.c.i-1], s.c.e.b[s.c.i-1], true
}

// fileRun yields a's pairs of a cold file from a chosen b on.
type fileRun struct {
	cf   *coldFile
	sc   *coldScratch
	a    uint64
	i, k int
	done bool
	err  error
}

func (f *fileRun) start(a, from uint64) {
	f.a = a
	if f.cf == nil || len(f.cf.dir) == 0 {
		f.done = true
		return
	}
	f.i = f.cf.seek(a, from)
	if f.err = f.cf.decode(f.i, f.sc); f.err != nil {
		f.done = true
		return
	}
	e := &f.sc.e
	for f.k < e.n && less(e.a[f.k], e.b[f.k], a, from) {
		f.k++
	}
}

func (f *fileRun) next() (uint64, uint64, bool) {
	if f.done || f.cf == nil {
		return 0, 0, false
	}
	e := &f.sc.e
	if f.k == e.n {
		f.i++
		if f.i >= len(f.cf.dir) || f.cf.dir[f.i].a != f.a {
			f.done = true
			return 0, 0, false
		}
		if f.err = f.cf.decode(f.i, f.sc); f.err != nil {
			f.done = true
			return 0, 0, false
		}
		f.k = 0
	}
	if e.a[f.k] != f.a {
		f.done = true
		return 0, 0, false
	}
	f.k++
	return f.a, e.b[f.k-1], true
}

// fileAll yields every pair of a cold file (nil: none).
type fileAll struct {
	cf   *coldFile
	sc   *coldScratch
	i, k int
	err  error
}

func (f *fileAll) next() (uint64, uint64, bool) {
	if f.cf == nil || f.err != nil {
		return 0, 0, false
	}
	e := &f.sc.e
	for f.k == e.n {
		if f.i == len(f.cf.dir) {
			return 0, 0, false
		}
		if f.err = f.cf.decode(f.i, f.sc); f.err != nil {
			return 0, 0, false
		}
		f.i++
		f.k = 0
	}
	f.k++
	return e.a[f.k-1], e.b[f.k-1], true
}

// mustCold panics on a cold file's error where the Store's method has no
// error to return (a change that finishes a load itself, which the
// engine never leaves to a change); the message names the file.
func mustCold(err error) {
	if err != nil {
		panic(fmt.Sprintf("follows: the reverse direction's cold file: %v", err))
	}
}
