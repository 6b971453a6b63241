package embedded

import (
	"cmp"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/registry"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/tier"
)

// Snapshots written before the post table (PTBL) kept a post's author and
// its counts apart: the registry (a PREG section, the image of
// engine/registry, or before it a POST item per post) and the post counts
// (PCNT, the image of engine/postcounts, or before it a CNTS item per
// post). They still load: each section into the store that wrote it, in
// memory, then both merged in id order into the post table with one
// tier.Import, which builds old windows sealed. The two stores are
// dropped afterwards; while the merge runs the posts are held twice.

// readLegacyPosts loads the registry section regTag and the counts
// section cntTag into st.posts and st.counted.
func readLegacyPosts(regSr, cntSr *snapshot.SectionReader, regTag, cntTag snapshot.Tag, pc *pacer, st *state, tc tables) error {
	millis := cmp.Or(tc.opts.WindowMillis, tier.DefaultWindowMillis)
	reg, err := registry.New(registry.Options{WindowMillis: millis, OpenAge: tc.opts.OpenAge})
	if err != nil {
		return err
	}
	cnt, err := postcounts.New(postcounts.Options{WindowMillis: millis, OpenAge: tc.opts.OpenAge, Now: tc.now})
	if err != nil {
		return err
	}
	if regTag == tagPosts {
		err = readPostItems(regSr, pc, reg, tc)
	} else {
		cr := &chunkReader{sr: regSr, p: pc}
		err = cr.load(func(r io.Reader) error { return reg.Load(r, tc.loadTime()) }, registry.ErrCorrupt)
	}
	if err != nil {
		return err
	}
	if cntTag == tagCounts {
		err = readCountItems(cntSr, pc, cnt)
	} else {
		cr := &chunkReader{sr: cntSr, p: pc}
		err = cr.load(func(r io.Reader) error { return cnt.Load(r, "") }, postcounts.ErrCorrupt)
	}
	if err != nil {
		return err
	}
	var rangeErr error
	seq := mergeLegacy(reg, cnt, snowflake.Windows{Millis: millis}, &rangeErr)
	if err := st.posts.Import(seq, tc.loadTime()); err != nil {
		return cntSr.Corrupt(fmt.Sprintf("the registry and the counts do not merge: %v", err))
	}
	if rangeErr != nil {
		return regSr.Corrupt(rangeErr.Error())
	}
	if err := cnt.Err(); err != nil {
		return cntSr.Corrupt(err.Error())
	}
	st.counted = int64(cnt.Len())
	return nil
}

// mergeLegacy yields the posts of reg and cnt in id order, each with its
// author and counts. The registry ranges in id order; the counts window
// by window in time order, in no order within a window, so one window's
// counts at a time are sorted and merged with the registry's posts. A
// post with counts and no registration (no snapshot has one) comes out
// with author 0, as the post table records it.
func mergeLegacy(reg *registry.Registry, cnt *postcounts.Store, wins snowflake.Windows, rangeErr *error) iter.Seq2[uint64, tier.Post] {
	return func(yield func(uint64, tier.Post) bool) {
		next, stop := iter.Pull2(func(yield func(uint64, uint64) bool) {
			*rangeErr = reg.Range(yield)
		})
		defer stop()
		rid, rauthor, rok := next()
		stopped := false
		var batch []countRow
		flush := func() {
			slices.SortFunc(batch, func(a, b countRow) int { return cmp.Compare(a.id, b.id) })
			for _, c := range batch {
				for rok && rid < c.id {
					if !yield(rid, tier.Post{Author: rauthor}) {
						stopped = true
						return
					}
					rid, rauthor, rok = next()
				}
				p := tier.Post{Counts: c.c}
				if rok && rid == c.id {
					p.Author = rauthor
					rid, rauthor, rok = next()
				}
				if !yield(c.id, p) {
					stopped = true
					return
				}
			}
			batch = batch[:0]
		}
		cur := int64(math.MinInt64)
		cnt.Range(func(id uint64, c engine.Counts) bool {
			if num, _, _ := wins.Of(id); num != cur {
				flush()
				cur = num
			}
			batch = append(batch, countRow{id, c})
			return !stopped
		})
		if !stopped {
			flush()
		}
		for !stopped && rok {
			if !yield(rid, tier.Post{Author: rauthor}) {
				return
			}
			rid, rauthor, rok = next()
		}
	}
}

// readPostItems loads a POST section, one (post, author) item a post, in
// id order, into reg.
func readPostItems(sr *snapshot.SectionReader, pc *pacer, reg *registry.Registry, tc tables) error {
	// Posts come in id order (Registry.Range), so the loader builds old
	// windows straight into sealed blocks.
	ld := reg.NewLoader(tc.loadTime())
	err := eachItem(sr, pc, func(d *dec) {
		p := d.fixed("post")
		a := d.u("author")
		if d.err == "" {
			ld.Add(p, a)
		}
	})
	ld.Close()
	if err != nil {
		return err
	}
	return checkLen(sr, reg.Len())
}

// countRow is one post's counts on their way from a snapshot into the
// post-count store, which takes them in batches (postcounts.Import) so old
// windows are built sealed rather than grown in open tables.
type countRow struct {
	id uint64
	c  engine.Counts
}

// readCountItems loads a CNTS section, one (post, field mask, non-zero
// counts) item a post, into cnt.
func readCountItems(sr *snapshot.SectionReader, pc *pacer, cnt *postcounts.Store) error {
	batch := make([]countRow, 0, 1<<16)
	var ierr error
	flush := func() {
		if ierr == nil && len(batch) > 0 {
			ierr = cnt.Import(func(yield func(uint64, engine.Counts) bool) {
				for _, r := range batch {
					if !yield(r.id, r.c) {
						return
					}
				}
			})
		}
		batch = batch[:0]
	}
	err := eachItem(sr, pc, func(d *dec) {
		p := d.fixed("post")
		mask := d.byte1("field mask")
		if d.err != "" {
			return
		}
		if mask == 0 || mask >= 1<<counters.NumFields {
			d.fail(fmt.Sprintf("bad field mask %#x", mask))
			return
		}
		var f [counters.NumFields]int64
		for i := range f {
			if mask&(1<<i) == 0 {
				continue
			}
			x := d.u("count")
			if d.err == "" && (x == 0 || x > math.MaxInt64) {
				d.fail("count out of range")
			}
			f[i] = int64(x)
		}
		if d.err == "" {
			batch = append(batch, countRow{p, engine.Counts{Likes: f[0], Comments: f[1], Reposts: f[2], Views: f[3], Favorites: f[4]}})
			if len(batch) == cap(batch) {
				flush()
			}
		}
	})
	if err != nil {
		return err
	}
	flush()
	if ierr != nil {
		return sr.Corrupt(ierr.Error())
	}
	return checkLen(sr, cnt.Len())
}
