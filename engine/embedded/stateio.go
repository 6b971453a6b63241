package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/follows"
	"github.com/tally-dev/tally/engine/likeset"
	"github.com/tally-dev/tally/engine/postcounts"
	"github.com/tally-dev/tally/engine/receipts"
	"github.com/tally-dev/tally/engine/registry"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/engine/table"
)

// The state as snapshot sections, version 1. Each section is a sequence
// of items; an item is one table entry unless said otherwise. Integers are
// uvarints (u), zig-zag varints (v) or little-endian fixed width (8 bytes:
// post ids and idempotency keys, which are spread over all 64 bits so a
// varint would be longer). Tables are written in slot order, lists in
// their order; derived tables (groups, members, msgs) are rebuilt from the
// lists they index rather than stored.
//
//	META  one item: u state version (1), v lastTime, u genHigh, v push, v nusers
//	POST  8 post, u author
//	CNTS  8 post, 1 byte mask of the non-zero fields (bit i: field i of
//	      counters.Field), then u value of each field in the mask
//	LIKE  u user, 8 post
//	FAVS  u user, 8 post
//	USER  u user, 1 byte mask of the non-zero fields, then u each of
//	      mentions, comments, likes, messages, click, cursor, day, flags
//	PROF  u user, v posts, v followers
//	FOLW  u viewer, u n, n × (u followee, v snapshot); a list longer than
//	      followsPerItem continues in the next items of the same viewer;
//	      n = 0 keeps an emptied list (the user stays known)
//	NOTF  in id order: u id, v time, u title length, title, u body length, body
//	GRPS  in groupList order: u id, u n, n × u user (mapid order),
//	      ceil(n/64) × u quit word
//	MSGS  in msgList order: u id, u group, u sender, v time, u text
//	      length, text, u receipt length, receipt (receipts encoding)
//	IDM2  8+8 key, u result, v time, 8 fingerprint (0: none recorded)
//	IDEM  the form before fingerprints: 8+8 key, u result, v time; read,
//	      no longer written
//	IDMQ  the live part of the expiry queue, in order: v time, 8+8 key
//
// The decoder rejects anything the encoder would not write: unknown or
// missing sections, duplicate keys, overlong varints, trailing bytes,
// oversized texts, zero values where the encoder leaves fields out,
// notification ids out of order, group and message references that do
// not resolve.
const stateVersion = 1

var (
	tagMeta     = snapshot.MakeTag("META")
	tagPosts    = snapshot.MakeTag("POST") // per post; read, no longer written
	tagRegistry = snapshot.MakeTag("PREG") // the registry's own image
	tagCounts   = snapshot.MakeTag("CNTS") // per post; read, no longer written
	tagPCounts  = snapshot.MakeTag("PCNT") // postcounts' own image
	tagLikes    = snapshot.MakeTag("LIKE")
	tagFavs     = snapshot.MakeTag("FAVS")
	tagUsers    = snapshot.MakeTag("USER")
	tagProfiles = snapshot.MakeTag("PROF")
	tagFollows  = snapshot.MakeTag("FOLW")
	tagNotifs   = snapshot.MakeTag("NOTF")
	tagGroups   = snapshot.MakeTag("GRPS")
	tagMsgs     = snapshot.MakeTag("MSGS")
	tagIdem     = snapshot.MakeTag("IDEM") // without fingerprints; read, no longer written
	tagIdem2    = snapshot.MakeTag("IDM2")
	tagIdemQ    = snapshot.MakeTag("IDMQ")

	// allTags are the sections a snapshot must have; the post counts
	// and the registry are each in one section of a pair (the current
	// form first, then the one older snapshots have).
	allTags = []snapshot.Tag{tagMeta, tagLikes, tagFavs, tagUsers, tagProfiles,
		tagFollows, tagNotifs, tagGroups, tagMsgs, tagIdemQ}
	countTags    = []snapshot.Tag{tagPCounts, tagCounts}
	registryTags = []snapshot.Tag{tagRegistry, tagPosts}
	idemTags     = []snapshot.Tag{tagIdem2, tagIdem}
)

// followsPerItem bounds a FOLW item so that a user following millions
// stays far below snapshot.MaxChunkBytes.
const followsPerItem = 4096

// image is the state at one log index plus what the engine derives from
// the records besides the state: the time of the last record and the
// highest generated id. It is what a snapshot holds and what recovery and
// the snapshotter rebuild by replay.
type image struct {
	st       *state
	index    uint64 // the last record applied
	lastTime int64
	genHigh  uint64 // snowflake.Generator high-water mark, 0 if none
}

func newImage(co postcounts.Options) *image { return &image{st: newState(co)} }

// applyRecord applies one log record, exactly as Open's replay does.
func (im *image) applyRecord(index uint64, payload []byte) error {
	o, err := decodeOp(payload)
	if err != nil {
		return fmt.Errorf("embedded: log record %d: %w", index, err)
	}
	im.st.apply(&o, nil)
	im.lastTime = max(im.lastTime, o.time)
	im.index = index
	// Ids made after a restart must stay above every id made before it,
	// even if the clock stepped back: notification ids order the list.
	switch o.kind {
	case opRepost, opSendMessage:
		im.genHigh = laterID(im.genHigh, o.b)
	case opPublish, opCreateGroup:
		im.genHigh = laterID(im.genHigh, o.a)
	}
	return nil
}

// laterID returns whichever of a and b moves a snowflake.Generator
// further when observed (its millisecond, then its sequence), so that
// observing the result equals observing every id.
func laterID(a, b uint64) uint64 {
	const seqMask = 1<<snowflake.SeqBits - 1
	ma, mb := snowflake.Millis(a), snowflake.Millis(b)
	if a == 0 || mb > ma || (mb == ma && b&seqMask > a&seqMask) {
		return b
	}
	return a
}

// pacer makes a background snapshot yield its core every few thousand
// items. Go has no goroutine priorities: a goroutine that never blocks
// keeps its P for a whole 10 ms time slice, and a request handler woken
// meanwhile (or one holding the state lock) waits in the run queue for
// it. Yielding every ~4096 items bounds that wait to a fraction of a
// millisecond for a cost too small to measure. Recovery, which has the
// machine to itself, does not yield (nil pacer).
type pacer struct{ n uint32 }

func (p *pacer) tick() {
	if p != nil {
		if p.n++; p.n%4096 == 0 {
			runtime.Gosched()
		}
	}
}

// enc appends encodings to the writer's chunk buffer.
type enc struct {
	w       *snapshot.Writer
	b       []byte
	scratch []byte
	p       *pacer
}

func (e *enc) start()         { e.b = e.w.Buf() }
func (e *enc) end()           { e.w.Item(e.b) }
func (e *enc) u(v uint64)     { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) v(v int64)      { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) fixed(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) str(s []byte)   { e.u(uint64(len(s))); e.b = append(e.b, s...) }

// masked appends a byte with bit i set for each non-zero f[i] (len(f) <=
// 8), then the non-zero values: most of a record's fields are zero.
func (e *enc) masked(f []uint64) {
	var mask byte
	for i, x := range f {
		if x != 0 {
			mask |= 1 << i
		}
	}
	e.b = append(e.b, mask)
	for _, x := range f {
		if x != 0 {
			e.u(x)
		}
	}
}

// writeImage writes im's sections to w (not Finish: the caller does).
// An error from stop ends it early, for a snapshot that is being
// cancelled; p paces it (nil: never yield).
func writeImage(w *snapshot.Writer, im *image, stop func() error, p *pacer) error {
	st := im.st
	e := &enc{w: w, p: p}
	section := func(tag snapshot.Tag, body func()) error {
		if err := stop(); err != nil {
			return err
		}
		w.Begin(tag)
		body()
		w.End()
		return w.Err()
	}
	steps := []struct {
		tag  snapshot.Tag
		body func()
	}{
		{tagMeta, func() { writeMeta(e, im) }},
		{registryTagWritten, func() { writeRegistry(w, e, st) }},
		{countsTagWritten, func() { writeCounts(w, e, st) }},
		{tagLikes, func() { writeSet(e, st.likes) }},
		{tagFavs, func() { writeSet(e, st.favs) }},
		{tagUsers, func() { writeUsers(e, st) }},
		{tagProfiles, func() { writeProfiles(e, st) }},
		{tagFollows, func() { writeFollows(e, st) }},
		{tagNotifs, func() { writeNotifs(e, st) }},
		{tagGroups, func() { writeGroups(e, st) }},
		{tagMsgs, func() { writeMsgs(e, st) }},
		{tagIdem2, func() { writeIdem(e, st) }},
		{tagIdemQ, func() { writeIdemQ(e, st) }},
	}
	for _, s := range steps {
		if err := section(s.tag, s.body); err != nil {
			return err
		}
	}
	return nil
}

// countsTagWritten, writeCounts, registryTagWritten and writeRegistry are
// how writeImage writes the post counts and the registry; a test swaps in
// the previous per-post sections to check that snapshots written before
// PCNT and PREG still load.
var (
	countsTagWritten   = tagPCounts
	writeCounts        = writePostCounts
	registryTagWritten = tagRegistry
	writeRegistry      = writeRegistryImage
)

// writeRegistryImage writes the PREG section: the registry's own image.
func writeRegistryImage(w *snapshot.Writer, e *enc, st *state) {
	cw := &chunkWriter{w: w, p: e.p}
	if _, err := st.posts.WriteTo(cw); err != nil && w.Err() == nil {
		cw.fail(err)
	}
	cw.close()
}

// writePostCounts writes the PCNT section: postcounts' own compact image
// (sealed windows as they are in memory, open tables as varints), a few
// bytes a post where one item per post took about 12, and a load that
// installs sealed windows instead of re-sealing them.
func writePostCounts(w *snapshot.Writer, e *enc, st *state) {
	cw := &chunkWriter{w: w, p: e.p}
	if _, err := st.counts.Snapshot().SelfContained().WriteTo(cw); err != nil && w.Err() == nil {
		cw.fail(err)
	}
	cw.close()
}

func writeSet(e *enc, t *likeset.Set) {
	t.Range(func(user, post uint64) bool {
		e.start()
		e.u(user)
		e.fixed(post)
		e.end()
		return true
	})
}

func (st *state) userFields(u uint64, r *userRec) [8]uint64 {
	return [8]uint64{uint64(st.counter(u, r, nMentions)), uint64(st.counter(u, r, nComments)),
		uint64(st.counter(u, r, nLikes)), uint64(st.counter(u, r, nMessages)),
		uint64(r.click), r.cursor, uint64(r.day), uint64(r.flags)}
}

// dec reads the items of one chunk, remembering the first error.
type dec struct {
	b   []byte
	err string
}

func (d *dec) fail(why string) {
	if d.err == "" {
		d.err = why
	}
}

func (d *dec) u(what string) uint64 {
	if d.err != "" {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad varint for " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) v(what string) int64 {
	if d.err != "" {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("bad varint for " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) fixed(what string) uint64 {
	if d.err != "" {
		return 0
	}
	if len(d.b) < 8 {
		d.fail(what + " cut short")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *dec) byte1(what string) byte {
	if d.err != "" {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(what + " cut short")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// bytes returns the next n bytes, aliasing the chunk buffer.
func (d *dec) bytes(max uint64, what string) []byte {
	n := d.u(what + " length")
	if d.err != "" {
		return nil
	}
	if n > max || n > uint64(len(d.b)) {
		d.fail(what + " too long")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// nonNeg checks a count that can never be negative in a live state.
func (d *dec) nonNeg(x int64, what string) int64 {
	if x < 0 {
		d.fail(what + " is negative")
	}
	return x
}

// readImage decodes a snapshot into a fresh image. With parallel set,
// independent sections are decoded on goroutines of their own: right for
// recovery, which has every core to itself, wrong for a background
// snapshot, where a dozen CPU-bound goroutines would queue the request
// handlers behind them for several scheduler time slices. Damage of any
// kind is a *snapshot.CorruptError; the first one by file offset is
// returned, and no partial image ever is.
func readImage(r *snapshot.Reader, parallel bool, co postcounts.Options) (*image, error) {
	var pc *pacer
	if !parallel {
		pc = &pacer{}
	}
	secs := map[snapshot.Tag]*snapshot.SectionReader{}
	for _, s := range r.Sections() {
		sr, _ := r.Section(s.Tag)
		secs[s.Tag] = sr
	}
	for _, tag := range allTags {
		if secs[tag] == nil {
			return nil, r.Corrupt(0, fmt.Sprintf("section %s is missing", tag))
		}
	}
	// one returns the section of pair that the snapshot has.
	one := func(pair []snapshot.Tag) (snapshot.Tag, error) {
		var found snapshot.Tag
		for _, tag := range pair {
			if secs[tag] != nil {
				if found != (snapshot.Tag{}) {
					return found, r.Corrupt(secs[tag].Info().Offset, fmt.Sprintf("sections %s and %s hold the same data", found, tag))
				}
				found = tag
			}
		}
		if found == (snapshot.Tag{}) {
			return found, r.Corrupt(0, fmt.Sprintf("section %s is missing", pair[0]))
		}
		return found, nil
	}
	countsTag, err := one(countTags)
	if err != nil {
		return nil, err
	}
	registryTag, err := one(registryTags)
	if err != nil {
		return nil, err
	}
	idemTag, err := one(idemTags)
	if err != nil {
		return nil, err
	}
	if len(secs) != len(allTags)+3 {
		for _, s := range r.Sections() {
			if !containsTag(allTags, s.Tag) && !containsTag(countTags, s.Tag) && !containsTag(registryTags, s.Tag) &&
				!containsTag(idemTags, s.Tag) {
				return nil, r.Corrupt(s.Offset, fmt.Sprintf("unknown section %s (written by a newer version?)", s.Tag))
			}
		}
	}
	items := func(tag snapshot.Tag) int {
		// A count too large for memory is caught by the chunks, which
		// must hold at least one byte per item; cap the size hint.
		return int(min(secs[tag].Info().Items, 1<<40))
	}
	im := &image{index: r.Index(), st: &state{
		posts:    newRegistry(co),
		counts:   newCounts(co),
		likes:    newLikeset(co),
		favs:     newLikeset(co),
		users:    table.New[uint64, userRec](hashU64, items(tagUsers)),
		wide:     table.New[uint64, [4]int64](hashU64, 8),
		profiles: table.New[uint64, profile](hashU64, items(tagProfiles)),
		follows:  follows.New(items(tagFollows)),
		groups:   table.New[uint64, uint32](hashU64, items(tagGroups)),
		members:  table.New[pair, uint32](hashPair, 256),
		msgs:     table.New[uint64, uint32](hashU64, items(tagMsgs)),
		idem:     table.New[idemKey, idemVal](hashIdem, items(idemTag)),
	}}
	st := im.st
	jobs := [][]func() error{
		{func() error { return readMeta(secs[tagMeta], pc, im) }},
		{func() error {
			if registryTag == tagPosts {
				return readPosts(secs[tagPosts], pc, st, co)
			}
			return readRegistry(secs[tagRegistry], pc, st, co)
		}},
		{func() error {
			if countsTag == tagCounts {
				return readCounts(secs[tagCounts], pc, st)
			}
			return readPostCounts(secs[tagPCounts], pc, st)
		}},
		{func() error { return readSet(secs[tagLikes], pc, st.likes, co) }},
		{func() error { return readSet(secs[tagFavs], pc, st.favs, co) }},
		{func() error { return readUsers(secs[tagUsers], pc, st) }},
		{func() error { return readProfiles(secs[tagProfiles], pc, st) }},
		{func() error { return readFollows(secs[tagFollows], pc, st) }},
		{func() error { return readNotifs(secs[tagNotifs], pc, st) }},
		// Messages refer to groups, so they are read after them.
		{func() error { return readGroups(secs[tagGroups], pc, st) }, func() error { return readMsgs(secs[tagMsgs], pc, st) }},
		{func() error { return readIdem(secs[idemTag], pc, st, idemTag == tagIdem2) }, func() error { return readIdemQ(secs[tagIdemQ], pc, st) }},
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		run := func() {
			for _, step := range job {
				if errs[i] = step(); errs[i] != nil {
					return
				}
			}
		}
		if parallel {
			wg.Go(run)
		} else {
			run()
		}
	}
	wg.Wait()
	var first error
	var firstOff int64 = math.MaxInt64
	for _, err := range errs {
		var ce *snapshot.CorruptError
		switch {
		case err == nil:
		case errors.As(err, &ce):
			if ce.Offset < firstOff {
				first, firstOff = err, ce.Offset
			}
		case firstOff == math.MaxInt64 && first == nil:
			first = err // a read error: report it if nothing is corrupt
		}
	}
	if first != nil {
		return nil, first
	}
	return im, nil
}

func containsTag(tags []snapshot.Tag, t snapshot.Tag) bool {
	for _, x := range tags {
		if x == t {
			return true
		}
	}
	return false
}

// eachItem calls fn for every item of the section, with a decoder over the
// rest of its chunk; fn consumes exactly one item. It checks the item
// count against the directory.
func eachItem(sr *snapshot.SectionReader, pc *pacer, fn func(d *dec)) error {
	var n uint64
	for {
		p, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		d := dec{b: p}
		for len(d.b) > 0 && d.err == "" {
			fn(&d)
			n++
			pc.tick()
		}
		if d.err != "" {
			return sr.Corrupt(fmt.Sprintf("item %d: %s", n, d.err))
		}
	}
	if want := sr.Info().Items; n != want {
		return sr.Corrupt(fmt.Sprintf("%d items, the directory says %d", n, want))
	}
	return nil
}

// checkLen reports duplicate keys: a table that ends with fewer entries
// than the section had items was given one key twice.
func checkLen(sr *snapshot.SectionReader, n int) error {
	if want := sr.Info().Items; uint64(n) != want {
		return sr.Corrupt(fmt.Sprintf("%d distinct keys in %d items", n, want))
	}
	return nil
}

func readMeta(sr *snapshot.SectionReader, pc *pacer, im *image) error {
	var seen bool
	err := eachItem(sr, pc, func(d *dec) {
		if seen {
			d.fail("more than one item")
			return
		}
		seen = true
		if v := d.u("state version"); d.err == "" && v != stateVersion {
			d.fail(fmt.Sprintf("state version %d, this build reads %d", v, stateVersion))
		}
		im.lastTime = d.nonNeg(d.v("lastTime"), "lastTime")
		im.genHigh = d.u("genHigh")
		im.st.push = d.nonNeg(d.v("push"), "push")
		im.st.nusers = d.nonNeg(d.v("nusers"), "nusers")
	})
	if err == nil && !seen {
		err = sr.Corrupt("no item")
	}
	return err
}

func readPosts(sr *snapshot.SectionReader, pc *pacer, st *state, co postcounts.Options) error {
	now := loadTime(co)
	// Posts come in id order (Registry.Range), so the loader builds old
	// windows straight into sealed blocks.
	ld := st.posts.NewLoader(now)
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
	return checkLen(sr, st.posts.Len())
}

// countRow is one post's counts on their way from a snapshot into the
// post-count store, which takes them in batches (postcounts.Import) so old
// windows are built sealed rather than grown in open tables.
type countRow struct {
	id uint64
	c  engine.Counts
}

func readCounts(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	batch := make([]countRow, 0, 1<<16)
	var ierr error
	flush := func() {
		if ierr == nil && len(batch) > 0 {
			ierr = st.counts.Import(func(yield func(uint64, engine.Counts) bool) {
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
	return checkLen(sr, st.counts.Len())
}

// readRegistry loads the PREG section: the registry's image.
func readRegistry(sr *snapshot.SectionReader, pc *pacer, st *state, co postcounts.Options) error {
	cr := &chunkReader{sr: sr, p: pc}
	return cr.load(func(r io.Reader) error { return st.posts.Load(r, loadTime(co)) }, registry.ErrCorrupt)
}

// loadTime is the clock that tells a loading store's old windows (built
// sealed) from its open ones.
func loadTime(co postcounts.Options) time.Time {
	if co.Now != nil {
		return co.Now()
	}
	return time.Now()
}

// readPostCounts loads the PCNT section: postcounts' image, streamed from
// the section's chunks.
func readPostCounts(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	cr := &chunkReader{sr: sr, p: pc}
	return cr.load(func(r io.Reader) error { return st.counts.Load(r, "") }, postcounts.ErrCorrupt)
}

// load runs a store's loader over the section and checks that it read
// the body to its end; damage the loader reports (errors wrapping
// corrupt, or a body cut short) becomes the section's CorruptError.
func (c *chunkReader) load(fn func(io.Reader) error, corrupt error) error {
	if err := fn(c); err != nil {
		if ce := (*snapshot.CorruptError)(nil); errors.As(err, &ce) {
			return err
		}
		if errors.Is(err, corrupt) || errors.Is(err, io.ErrUnexpectedEOF) {
			return c.sr.Corrupt(err.Error())
		}
		return err
	}
	return c.end()
}

// chunkWriter streams a section whose body is a format of its own into
// chunks of about snapshot.TargetChunkBytes, an item each.
type chunkWriter struct {
	w   *snapshot.Writer
	p   *pacer
	buf []byte
	err error
}

func (c *chunkWriter) Write(b []byte) (int, error) {
	if err := c.w.Err(); err != nil {
		return 0, err
	}
	c.buf = append(c.buf, b...)
	for len(c.buf) >= snapshot.TargetChunkBytes {
		c.w.Chunk(c.buf[:snapshot.TargetChunkBytes], 1)
		c.buf = append(c.buf[:0], c.buf[snapshot.TargetChunkBytes:]...)
		c.p.tick()
	}
	return len(b), c.w.Err()
}

// fail records an error of the body's own writer; close reports it.
func (c *chunkWriter) fail(err error) { c.err = err }

func (c *chunkWriter) close() {
	if c.err != nil {
		c.w.Fail(c.err)
		return
	}
	if len(c.buf) > 0 {
		c.w.Chunk(c.buf, 1)
	}
}

// chunkReader reads back what a chunkWriter wrote.
type chunkReader struct {
	sr  *snapshot.SectionReader
	p   *pacer
	cur []byte
	n   uint64
	err error
}

func (c *chunkReader) Read(b []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		c.cur, c.err = c.sr.Next()
		if c.err == nil {
			c.n++
			c.p.tick()
		}
	}
	n := copy(b, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// end checks that the body was read to the section's last byte and that
// the chunks are the items the directory lists.
func (c *chunkReader) end() error {
	if len(c.cur) > 0 {
		return c.sr.Corrupt(fmt.Sprintf("%d bytes after the end of the section's body", len(c.cur)))
	}
	if _, err := c.sr.Next(); err != io.EOF {
		if err != nil {
			return err
		}
		return c.sr.Corrupt("a chunk after the end of the section's body")
	}
	if want := c.sr.Info().Items; c.n != want {
		return c.sr.Corrupt(fmt.Sprintf("%d chunks, the directory lists %d items", c.n, want))
	}
	return nil
}

// readSet loads a LIKE or FAVS section into t in batches (likeset.Load
// builds old windows sealed rather than through open tables).
func readSet(sr *snapshot.SectionReader, pc *pacer, t *likeset.Set, co postcounts.Options) error {
	now := loadTime(co)
	batch := make([][2]uint64, 0, 1<<16)
	var lerr error
	flush := func() {
		if lerr == nil && len(batch) > 0 {
			lerr = t.Load(func(yield func(uint64, uint64) bool) {
				for _, p := range batch {
					if !yield(p[0], p[1]) {
						return
					}
				}
			}, now)
		}
		batch = batch[:0]
	}
	err := eachItem(sr, pc, func(d *dec) {
		u := d.u("user")
		p := d.fixed("post")
		if d.err == "" {
			batch = append(batch, [2]uint64{u, p})
			if len(batch) == cap(batch) {
				flush()
			}
		}
	})
	if err != nil {
		return err
	}
	flush()
	if lerr != nil {
		return sr.Corrupt(lerr.Error())
	}
	return checkLen(sr, t.Len())
}

func readUsers(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		u := d.u("user")
		mask := d.byte1("field mask")
		var f [8]uint64
		for i := range f {
			if mask&(1<<i) != 0 {
				if f[i] = d.u("field"); f[i] == 0 {
					d.fail("zero field in the mask")
				}
			}
		}
		if d.err != "" {
			return
		}
		if f[6] > math.MaxUint32 || f[7] > math.MaxUint32 || max(f[0], f[1], f[2], f[3], f[4]) > math.MaxInt64 {
			d.fail("field out of range")
			return
		}
		if _, dup := st.users.Get(u); dup {
			d.fail(fmt.Sprintf("user %d listed twice", u))
			return
		}
		r := st.users.Upsert(u)
		*r = userRec{click: int64(f[4]), cursor: f[5], day: uint32(f[6]), flags: uint32(f[7])}
		for k := range r.n {
			st.setCounter(u, r, k, int64(f[k]))
		}
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.users.Len())
}

func readProfiles(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		u := d.u("user")
		p := profile{posts: d.v("posts"), followers: d.v("followers")}
		if d.err == "" {
			st.profiles.Put(u, p)
		}
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.profiles.Len())
}

func readFollows(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	var last, lastN uint64
	var targets []uint64
	var snaps []int64
	return eachItem(sr, pc, func(d *dec) {
		viewer := d.u("viewer")
		n := d.u("list length")
		if d.err != "" {
			return
		}
		if n > followsPerItem || n > uint64(len(d.b)/2) {
			d.fail("follow list too long")
			return
		}
		if st.follows.Has(viewer) && (viewer != last || lastN != followsPerItem || n == 0) {
			// A continuation follows a full item of its viewer and is
			// never empty; anything else is a second list for one viewer.
			d.fail(fmt.Sprintf("viewer %d listed twice", viewer))
			return
		}
		last, lastN = viewer, n
		targets, snaps = targets[:0], snaps[:0]
		for range n {
			targets = append(targets, d.u("followee"))
			snaps = append(snaps, d.v("snapshot"))
		}
		if d.err != "" {
			return
		}
		if err := st.follows.Load(viewer, targets, snaps); err != nil {
			d.fail(err.Error())
		}
	})
}

func readNotifs(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	return eachItem(sr, pc, func(d *dec) {
		id := d.u("id")
		t := d.nonNeg(d.v("time"), "time")
		title := d.bytes(maxStringLen, "title")
		body := d.bytes(maxStringLen, "body")
		if d.err != "" {
			return
		}
		if n := len(st.notifs); id == 0 || n > 0 && id <= st.notifs[n-1].id {
			d.fail("notification ids not increasing")
			return
		}
		off := uint64(len(st.notifText))
		st.notifText = append(append(st.notifText, title...), body...)
		st.notifs = append(st.notifs, notif{id: id, time: t, off: off,
			titleLen: uint32(len(title)), bodyLen: uint32(len(body))})
	})
}

func readGroups(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		id := d.u("group")
		n := d.u("members")
		if d.err != "" {
			return
		}
		if n == 0 || n > engine.MaxGroupMembers || n > uint64(len(d.b)) {
			d.fail("bad member count")
			return
		}
		if _, dup := st.groups.Get(id); dup {
			d.fail(fmt.Sprintf("group %d listed twice", id))
			return
		}
		g := group{id: id, byMap: make([]uint64, n), quit: make([]uint64, (n+63)/64)}
		for i := range g.byMap {
			g.byMap[i] = d.u("member")
		}
		for i := range g.quit {
			g.quit[i] = d.u("quit word")
		}
		if d.err != "" {
			return
		}
		if tail := n % 64; tail != 0 && g.quit[len(g.quit)-1]>>tail != 0 {
			d.fail("quit bits past the last member")
			return
		}
		quit := 0
		for _, w := range g.quit {
			quit += bits.OnesCount64(w)
		}
		g.current = int(n) - quit
		for i, u := range g.byMap {
			k := pair{id, u}
			if _, dup := st.members.Get(k); dup {
				d.fail(fmt.Sprintf("user %d twice in group %d", u, id))
				return
			}
			st.members.Put(k, uint32(i+1))
		}
		st.groups.Put(id, uint32(len(st.groupList)))
		st.groupList = append(st.groupList, g)
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.groups.Len())
}

func readMsgs(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	err := eachItem(sr, pc, func(d *dec) {
		id := d.u("message")
		gid := d.u("group")
		sender := d.u("sender")
		t := d.nonNeg(d.v("time"), "time")
		text := d.bytes(maxStringLen, "text")
		rcb := d.bytes(snapshot.MaxChunkBytes, "receipt")
		if d.err != "" {
			return
		}
		g, ok := st.group(gid)
		if !ok {
			d.fail(fmt.Sprintf("message %d of unknown group %d", id, gid))
			return
		}
		if _, dup := st.msgs.Get(id); dup {
			d.fail(fmt.Sprintf("message %d listed twice", id))
			return
		}
		var rc receipts.Receipt
		if err := rc.UnmarshalBinary(rcb); err != nil {
			d.fail(fmt.Sprintf("message %d: %v", id, err))
			return
		}
		if rc.MaxID() > uint32(len(g.byMap)) {
			d.fail(fmt.Sprintf("message %d counts mapids past its group's members", id))
			return
		}
		off := uint64(len(st.msgText))
		st.msgText = append(st.msgText, text...)
		st.msgs.Put(id, uint32(len(st.msgList)))
		st.rcBytes += rc.SizeBytes()
		st.msgList = append(st.msgList, message{id: id, group: gid, sender: sender, time: t,
			off: off, textLen: uint32(len(text)), rc: rc})
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.msgs.Len())
}

func readIdem(sr *snapshot.SectionReader, pc *pacer, st *state, withFP bool) error {
	err := eachItem(sr, pc, func(d *dec) {
		k := idemKey{d.fixed("key"), d.fixed("key")}
		v := idemVal{result: d.u("result"), time: d.v("time")}
		if withFP {
			v.fp = d.fixed("fingerprint")
		}
		if d.err == "" && k == (idemKey{}) {
			d.fail("zero key")
		}
		if d.err == "" {
			st.idem.Put(k, v)
		}
	})
	if err != nil {
		return err
	}
	return checkLen(sr, st.idem.Len())
}

func readIdemQ(sr *snapshot.SectionReader, pc *pacer, st *state) error {
	return eachItem(sr, pc, func(d *dec) {
		q := idemExpiry{time: d.v("time"), key: idemKey{d.fixed("key"), d.fixed("key")}}
		if d.err != "" {
			return
		}
		if q.key == (idemKey{}) {
			d.fail("zero key")
			return
		}
		if n := len(st.idemQ); n > 0 && q.time < st.idemQ[n-1].time {
			d.fail("expiry queue out of time order")
			return
		}
		st.idemQ = append(st.idemQ, q)
	})
}

func writeMeta(e *enc, im *image) {
	e.start()
	e.u(stateVersion)
	e.v(im.lastTime)
	e.u(im.genHigh)
	e.v(im.st.push)
	e.v(im.st.nusers)
	e.end()
}

func writeUsers(e *enc, st *state) {
	st.users.Range(func(u uint64, r userRec) bool {
		f := st.userFields(u, &r)
		e.start()
		e.u(u)
		e.masked(f[:])
		e.end()
		return true
	})
}

func writeProfiles(e *enc, st *state) {
	st.profiles.Range(func(u uint64, p profile) bool {
		e.start()
		e.u(u)
		e.v(p.posts)
		e.v(p.followers)
		e.end()
		return true
	})
}

func writeFollows(e *enc, st *state) {
	st.follows.Range(func(viewer uint64, targets []uint64, snaps []int64) bool {
		for first := true; first || len(targets) > 0; first = false {
			n := min(len(targets), followsPerItem)
			e.start()
			e.u(viewer)
			e.u(uint64(n))
			for i, f := range targets[:n] {
				e.u(f)
				e.v(snaps[i])
			}
			e.end()
			targets, snaps = targets[n:], snaps[n:]
		}
		return true
	})
}

func writeNotifs(e *enc, st *state) {
	for i := range st.notifs {
		n := &st.notifs[i]
		text := st.notifText[n.off : n.off+uint64(n.titleLen)+uint64(n.bodyLen)]
		e.start()
		e.u(n.id)
		e.v(n.time)
		e.str(text[:n.titleLen])
		e.str(text[n.titleLen:])
		e.end()
	}
}

func writeGroups(e *enc, st *state) {
	for i := range st.groupList {
		g := &st.groupList[i]
		e.start()
		e.u(g.id)
		e.u(uint64(len(g.byMap)))
		for _, u := range g.byMap {
			e.u(u)
		}
		for _, q := range g.quit[:(len(g.byMap)+63)/64] {
			e.u(q)
		}
		e.end()
	}
}

func writeMsgs(e *enc, st *state) {
	for i := range st.msgList {
		m := &st.msgList[i]
		e.start()
		e.u(m.id)
		e.u(m.group)
		e.u(m.sender)
		e.v(m.time)
		e.str(st.msgText[m.off : m.off+uint64(m.textLen)])
		var err error
		if e.scratch, err = m.rc.AppendBinary(e.scratch[:0]); err != nil {
			panic(err) // appending to a slice cannot fail
		}
		e.str(e.scratch)
		e.end()
	}
}

func writeIdem(e *enc, st *state) {
	st.idem.Range(func(k idemKey, v idemVal) bool {
		e.start()
		e.fixed(k[0])
		e.fixed(k[1])
		e.u(v.result)
		e.v(v.time)
		e.fixed(v.fp)
		e.end()
		return true
	})
}

func writeIdemQ(e *enc, st *state) {
	for _, q := range st.idemQ[st.idemHead:] {
		e.start()
		e.v(q.time)
		e.fixed(q.key[0])
		e.fixed(q.key[1])
		e.end()
	}
}
