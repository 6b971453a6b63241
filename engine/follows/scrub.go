package follows

import (
	"fmt"
	"path/filepath"
	"slices"
)

// A scrub takes the pairs an erasure removed out of the cold file's bytes
// without rewriting the file (cold.go says why). Under the write lock the
// plan freezes the top overlay's dels (freeze.go: the live set copies on
// write meanwhile) and takes the users waiting. Run, with no lock:
//
//   - walks the frozen dels for the pairs of those users, (user, follower)
//     and (followee, user), sorted as the file is;
//   - reads each block that holds one (the directory finds it by a
//     binary search, so the blocks cost O(pairs × log blocks) to find and
//     the rest of the file is not read), drops the pairs and appends the
//     block's new record at the file's end, past what any reader reads.
//
// Finish, under the write lock, points the directory entries at the new
// records (an emptied block's entry goes), queues the old records' bytes
// for Collect to punch out, and takes the pairs out of the top overlay's
// dels, a block of them at a time (pairs.removeAll): the file no longer
// holds them. A pair followed again while Run ran is no longer in the
// dels but must still be there, so it goes to the adds instead. A Run that fails (a write, a damaged block) truncates
// what it appended; the users wait for the next pass.
//
// Walking the dels costs O(overlay) of memory reads, which the bound on
// the overlay keeps a small fraction of the file's pairs; finding the
// pairs of a user's followees any other way would need an index by
// follower that the overlay does not keep.
type scrubJob struct {
	c     *coldRev
	cf    *coldFile
	users []uint64 // sorted
	dels  pairs    // the top overlay's dels, frozen
	// Run's results: the pairs taken out, and the blocks rewritten.
	gone []pair
	news []rewritten
	end  int64 // the file's end after the new records
	err  error
}

// rewritten is block i's new record; its entry's loc is 0 when the block
// is left empty.
type rewritten struct {
	i  int
	to coldEntry
}

// extent is a superseded record's bytes, for Collect to destroy.
type extent struct {
	cf   *coldFile
	off  int64
	size int64
}

// planScrub returns the scrub due, or nil. A scrub with no pair to take
// out of the file has nothing to do: without a lower overlay, every pair
// removed from the file is in the top's dels.
func (c *coldRev) planScrub() *scrubJob {
	if len(c.scrubs) == 0 {
		return nil
	}
	if c.file == nil || c.top.dels.n == 0 {
		c.scrubs = c.scrubs[:0]
		return nil
	}
	users := slices.Clone(c.scrubs)
	slices.Sort(users)
	c.scrubs = c.scrubs[:0]
	job := &scrubJob{c: c, cf: c.file, users: users, dels: c.top.dels.freeze()}
	c.job = job
	return job
}

func (j *scrubJob) What() string {
	return fmt.Sprintf("scrub of %d users from %s", len(j.users), filepath.Base(j.cf.path))
}

// Run finds and rewrites the blocks with no lock: it reads the frozen
// dels and the file up to its end, which nothing changes until Finish,
// and writes past that end.
func (j *scrubJob) Run() error {
	j.err = j.run()
	if j.err != nil {
		// Best effort: a failed truncate leaves bytes past the end
		// that no entry locates and the next merge drops with the file.
		j.cf.f.Truncate(j.cf.size)
	}
	return j.err
}

func (j *scrubJob) run() error {
	scrubbed := func(u uint64) bool { _, ok := slices.BinarySearch(j.users, u); return ok }
	for cur := j.dels.cursor(); cur.valid(); cur.i++ {
		if a, b := cur.e.a[cur.i], cur.e.b[cur.i]; scrubbed(a) || scrubbed(b) {
			j.gone = append(j.gone, pair{a, b})
		}
	}
	cf := j.cf
	sc := new(coldScratch)
	var kept entries
	var enc encoder
	var buf []byte // records not yet written, from byte bufAt
	bufAt := cf.size
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if _, err := coldWriteAt(cf.f, buf, bufAt); err != nil {
			return fmt.Errorf("follows: %s: %w", cf.path, err)
		}
		bufAt += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	for g := 0; g < len(j.gone); {
		i := cf.seek(j.gone[g].a, j.gone[g].b)
		if err := cf.decode(i, sc); err != nil {
			return err
		}
		// Keep the block's pairs but the ones gone, all of which in the
		// block's range must be in it.
		e := &sc.e
		kept.n = 0
		for x := range e.n {
			if g < len(j.gone) && less(j.gone[g].a, j.gone[g].b, e.a[x], e.b[x]) {
				return j.missing(i, g)
			}
			if g < len(j.gone) && j.gone[g] == (pair{e.a[x], e.b[x]}) {
				g++
				continue
			}
			kept.a[kept.n], kept.b[kept.n], kept.v[kept.n] = e.a[x], e.b[x], e.v[x]
			kept.n++
		}
		if g < len(j.gone) && (i+1 == len(cf.dir) || less(j.gone[g].a, j.gone[g].b, cf.dir[i+1].a, cf.dir[i+1].b)) {
			return j.missing(i, g)
		}
		r := rewritten{i: i}
		if kept.n > 0 {
			off := bufAt + int64(len(buf))
			buf = appendRecord(buf, &enc, &kept)
			loc, err := coldLoc(cf.path, off, int(bufAt+int64(len(buf))-off), kept.n)
			if err != nil {
				return err
			}
			r.to = coldEntry{a: kept.a[0], b: kept.b[0], loc: loc}
		}
		j.news = append(j.news, r)
		if len(buf) >= 1<<16 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	j.end = bufAt
	return nil
}

// missing is the error of a pair the dels hold that the block of its
// range does not: the overlay and the file disagree (Check says more).
func (j *scrubJob) missing(i, g int) error {
	return fmt.Errorf("follows: %s: the overlay removes (%d, %d), which record %d does not hold", j.cf.path, j.gone[g].a, j.gone[g].b, i)
}

// Finish installs the new records under the write lock (see above).
func (j *scrubJob) Finish() error {
	c := j.c
	c.job = nil
	c.top.dels.thaw()
	if j.err == nil && c.file != j.cf {
		j.err = fmt.Errorf("follows: a scrub of %s finished after the file was replaced", j.cf.path)
	}
	if j.err != nil {
		for _, u := range j.users {
			if !slices.Contains(c.scrubs, u) {
				c.scrubs = append(c.scrubs, u)
			}
		}
		return j.err
	}
	cf := j.cf
	emptied := false
	for _, r := range j.news {
		d := &cf.dir[r.i]
		c.punch = append(c.punch, extent{cf: cf, off: d.off(), size: int64(d.size())})
		cf.dead += int64(d.size())
		*d = r.to
		emptied = emptied || r.to.loc == 0
	}
	if emptied {
		cf.dir = slices.DeleteFunc(cf.dir, func(d coldEntry) bool { return d.loc == 0 })
	}
	cf.n -= len(j.gone)
	cf.size = j.end
	for _, p := range c.top.dels.removeAll(j.gone, nil) {
		c.top.adds.insert(p.a, p.b, 0) // followed again meanwhile
	}
	return nil
}
