package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The state as snapshot sections, state version 7: one section per table,
// the only set this build reads or writes (a snapshot of another version
// is refused whole, engine.FormatError). Each section is a sequence
// of items; an item is one table entry unless said otherwise. Integers are
// uvarints (u), zig-zag varints (v) or little-endian fixed width (8 bytes:
// post ids and idempotency keys, which are spread over all 64 bits so a
// varint would be longer). Tables are written in slot order, lists in
// their order; derived tables (groups, members, msgs) are rebuilt from the
// lists they index rather than stored.
//
//	META  one item: u state version (6), v lastTime, u genHigh, v push, v nusers,
//	      u imported lo, u imported hi (the import span; 0, 0: none)
//	PTBL  the post table (a post's author and counts): one body in
//	      chunks, 8 bytes of the number of posts with a count, then the
//	      table's image (engine/tier's snapshot format 5, a View's: the
//	      kinds table, then cold windows written as sealed ones, so the
//	      snapshot stands alone; rows and blocks with reaction kinds; open
//	      windows' and deltas' entries in their tables' order)
//	LKST  the like set: its image (engine/tier's snapshot format 5, a
//	      View's, as PTBL's, whose pairs may carry a reaction kind) in
//	      chunks
//	FVST  the favorite set, likewise
//	PDEL  the deleted posts' set ((0, post) pairs), likewise
//	CMNT  the counted comment ids' set ((comment, post) pairs), likewise
//	CMDL  the deleted comment ids' set, likewise
//	CMWR  the comment writers' set ((writer, comment) pairs), likewise
//	REPO  u repost, u original (one item per repost whose original is kept)
//	ERAS  u user, u phase, u cursor post, u cursor user (the erasures
//	      under way, oldest first)
//	USER  u user, 1 byte mask of the non-zero fields, then u each of
//	      mentions, comments, likes, messages, click, cursor, day, flags
//	      (one item per user with a badge or a visit record or a click,
//	      all in one)
//	PROF  u user, v posts, v followers, v deleted posts (one item per
//	      user with a post, follower or deleted-post count, all in one)
//	FOLW  u viewer, u n, n × (u followee, v snapshot); a list longer than
//	      followsPerItem continues in the next items of the same viewer;
//	      n = 0 keeps an emptied list (the user stays known)
//	NOTF  in id order: u id, v time, u title length, title, u body length, body
//	GRPS  in groupList order: u id, u n, n × u user (mapid order),
//	      ceil(n/64) × u quit word
//	MSGS  in msgList order: u id, u group, u sender, v time, u text
//	      length, text, u receipt length, receipt (receipts encoding)
//	IDEM  8+8 key, u result, v time, 8 fingerprint
//	IDMQ  the live part of the expiry queue, in order: v time, 8+8 key
//
// The decoder reads META first and refuses another state version before
// it looks at the sections; then it rejects anything the encoder would
// not write: unknown or missing sections, duplicate keys, overlong
// varints, trailing bytes,
// oversized texts, zero values where the encoder leaves fields out,
// notification ids out of order, group and message references that do
// not resolve.
const stateVersion = 7

var (
	tagMeta      = snapshot.MakeTag("META")
	tagPostTable = snapshot.MakeTag("PTBL") // the post table's image
	tagLikeSet   = snapshot.MakeTag("LKST") // the like set's image
	tagFavSet    = snapshot.MakeTag("FVST")
	tagDeleted   = snapshot.MakeTag("PDEL")
	tagComments  = snapshot.MakeTag("CMNT")
	tagUncounted = snapshot.MakeTag("CMDL")
	tagWriters   = snapshot.MakeTag("CMWR")
	tagOrigins   = snapshot.MakeTag("REPO")
	tagErasures  = snapshot.MakeTag("ERAS")
	tagUsers     = snapshot.MakeTag("USER")
	tagProfiles  = snapshot.MakeTag("PROF")
	tagFollows   = snapshot.MakeTag("FOLW")
	tagNotifs    = snapshot.MakeTag("NOTF")
	tagGroups    = snapshot.MakeTag("GRPS")
	tagMsgs      = snapshot.MakeTag("MSGS")
	tagIdem      = snapshot.MakeTag("IDEM")
	tagIdemQ     = snapshot.MakeTag("IDMQ")

	// allTags are the sections a snapshot has, in the order writeImage
	// writes them.
	allTags = []snapshot.Tag{tagMeta, tagPostTable, tagLikeSet, tagFavSet, tagDeleted, tagComments,
		tagUncounted, tagWriters, tagOrigins, tagErasures, tagUsers, tagProfiles,
		tagFollows, tagNotifs, tagGroups, tagMsgs, tagIdem, tagIdemQ}
)

// image is the state at one log index plus what the engine derives from
// the records besides the state: the time of the last record and the
// highest generated id. It is what a snapshot holds and what recovery and
// the snapshotter rebuild by replay.
type image struct {
	st       *state
	index    uint64 // the last record applied
	lastTime int64
	genHigh  uint64 // snowflake.Generator high-water mark, 0 if none
	// erasedAt is the index of the last record replayed that ended an
	// erasure (0: none), so that the next snapshot prunes what names the
	// user.
	erasedAt uint64
	rd       recordReader
}

func newImage(tc tables) *image { return &image{st: newState(tc)} }

// applyRecord applies one log record, exactly as Open's replay does.
func (im *image) applyRecord(index uint64, payload []byte) error {
	r, err := im.rd.decode(payload)
	if err != nil {
		return fmt.Errorf("embedded: log record %d: %w", index, err)
	}
	erasing := len(im.st.erasing)
	im.st.apply(r, nil, false)
	if len(im.st.erasing) < erasing {
		im.erasedAt = index
	}
	if _, ok := r.(*importRec); ok && foldBehind(im.st.posted) {
		// Replay and a snapshot's rebuild own their state, and apply an
		// import's authors as fast as Import does.
		im.st.posted.Compact()
	}
	h, _, _, id := recordInfo(r)
	im.lastTime = max(im.lastTime, h.time)
	im.index = index
	// Ids made after a restart must stay above every id made before it,
	// even if the clock stepped back: notification ids order the list.
	if id != 0 {
		im.genHigh = laterID(im.genHigh, id)
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

// enc appends encodings to the writer's chunk buffer.
type enc struct {
	w       *snapshot.Writer
	b       []byte
	scratch []byte
	p       *pacer
}

func (e *enc) start()         { e.b = e.w.Buf() }
func (e *enc) end()           { e.w.Item(e.b); e.p.tick() }
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

// writeImage writes the sections of im, an image nothing else uses while
// it runs (a backup's, a test's), to w (not Finish: the caller does): it
// takes a cut of it, writes that and thaws it.
func writeImage(w *snapshot.Writer, im *image, stop func() error, p *pacer) error {
	c, err := im.cut()
	if err != nil {
		return err
	}
	return errors.Join(writeCut(w, c, stop, p), c.thaw())
}

// cut takes a cut of the image's state at its index (see cut).
func (im *image) cut() (*cut, error) {
	c, err := im.st.freeze()
	if err != nil {
		return nil, err
	}
	c.index, c.lastTime, c.genHigh = im.index, im.lastTime, im.genHigh
	return c, nil
}

// writeCut writes the cut's sections to w (not Finish: the caller does).
// It reads only what the cut froze, so it needs no lock. An error from
// stop ends it early, for a snapshot that is being cancelled; p paces it
// (nil: never yield).
func writeCut(w *snapshot.Writer, c *cut, stop func() error, p *pacer) error {
	st := c.st
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
	steps := []imageStep{
		{tagMeta, func() { writeMeta(e, c) }},
		{tagPostTable, func() { writePostTable(w, e, c.posts, st.counted) }},
		{tagLikeSet, func() { writeSetImage(w, e, c.likes) }},
		{tagFavSet, func() { writeSetImage(w, e, c.favs) }},
		{tagDeleted, func() { writeSetImage(w, e, c.deleted) }},
		{tagComments, func() { writeSetImage(w, e, c.comments) }},
		{tagUncounted, func() { writeSetImage(w, e, c.uncounted) }},
		{tagWriters, func() { writeSetImage(w, e, c.writers) }},
		{tagOrigins, func() { writeOrigins(e, st) }},
		{tagErasures, func() { writeErasures(e, st) }},
		{tagUsers, func() { writeUsers(e, st) }},
		{tagProfiles, func() { writeProfiles(e, st) }},
		{tagFollows, func() { writeFollows(e, st) }},
		{tagNotifs, func() { writeNotifs(e, st) }},
		{tagGroups, func() { writeGroups(e, st) }},
		{tagMsgs, func() { writeMsgs(e, st) }},
		{tagIdem, func() { writeIdem(e, st) }},
		{tagIdemQ, func() { writeIdemQ(e, st) }},
	}
	for _, s := range steps {
		if err := section(s.tag, s.body); err != nil {
			return err
		}
	}
	return nil
}

// imageStep is one section of a snapshot and how to write its body.
type imageStep struct {
	tag  snapshot.Tag
	body func()
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
// recovery, which has every core to itself, wrong beside a server, where
// a dozen CPU-bound goroutines would queue the request handlers behind
// them for several scheduler time slices. Damage of any
// kind is a *snapshot.CorruptError; the first one by file offset is
// returned, and no partial image ever is.
func readImage(r *snapshot.Reader, parallel bool, tc tables) (*image, error) {
	var pc *pacer
	if !parallel {
		pc = &pacer{}
	}
	secs := map[snapshot.Tag]*snapshot.SectionReader{}
	for _, s := range r.Sections() {
		sr, _ := r.Section(s.Tag)
		secs[s.Tag] = sr
	}
	// META first: a snapshot of another state version is refused before
	// its sections are judged by this version's list.
	if secs[tagMeta] == nil {
		return nil, r.Corrupt(0, fmt.Sprintf("section %s is missing", tagMeta))
	}
	m, err := readMeta(secs[tagMeta], pc)
	if err != nil {
		return nil, err
	}
	for _, tag := range allTags {
		if secs[tag] == nil {
			return nil, r.Corrupt(0, fmt.Sprintf("section %s is missing", tag))
		}
	}
	for _, s := range r.Sections() {
		if !slices.Contains(allTags, s.Tag) {
			return nil, r.Corrupt(s.Offset, fmt.Sprintf("unknown section %s", s.Tag))
		}
	}
	items := func(tag snapshot.Tag) int {
		// A count too large for memory is caught by the chunks, which
		// must hold at least one byte per item; cap the size hint.
		return int(min(secs[tag].Info().Items, 1<<40))
	}
	// USER's items split between badges, seens and clicks by what they
	// hold, so those start small and grow as replay grows them.
	st := newSizedState(tc, stateSizes{origins: items(tagOrigins), users: 8, posted: items(tagProfiles),
		groups: items(tagGroups), msgs: items(tagMsgs), idem: items(tagIdem)})
	st.push, st.nusers, st.imported = m.push, m.nusers, m.imported
	im := &image{index: r.Index(), lastTime: m.lastTime, genHigh: m.genHigh, st: st}
	jobs := [][]func() error{
		{func() error { return readPostTable(secs[tagPostTable], pc, st, tc) }},
		{func() error { return readSet(secs[tagLikeSet], pc, st.likes, tc) }},
		{func() error { return readSet(secs[tagFavSet], pc, st.favs, tc) }},
		{func() error { return readSet(secs[tagDeleted], pc, st.deleted, tc) }},
		{func() error { return readSet(secs[tagComments], pc, st.comments, tc) }},
		{func() error { return readSet(secs[tagUncounted], pc, st.uncounted, tc) }},
		{func() error { return readSet(secs[tagWriters], pc, st.writers, tc) }},
		{func() error { return readOrigins(secs[tagOrigins], pc, st) }},
		{func() error { return readErasures(secs[tagErasures], pc, st) }},
		{func() error { return readUsers(secs[tagUsers], pc, st) }},
		{func() error { return readProfiles(secs[tagProfiles], pc, st) }},
		{func() error { return readFollows(secs[tagFollows], pc, st) }},
		{func() error { return readNotifs(secs[tagNotifs], pc, st) }},
		// Messages refer to groups, so they are read after them.
		{func() error { return readGroups(secs[tagGroups], pc, st) }, func() error { return readMsgs(secs[tagMsgs], pc, st) }},
		{func() error { return readIdem(secs[tagIdem], pc, st) }, func() error { return readIdemQ(secs[tagIdemQ], pc, st) }},
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

// meta is what the META section holds besides the state version.
type meta struct {
	lastTime int64
	genHigh  uint64
	push     int64
	nusers   int64
	imported engine.ImportSpan
}

// readMeta reads the META section; a state version other than this
// build's is an *engine.FormatError, whatever else the section holds.
func readMeta(sr *snapshot.SectionReader, pc *pacer) (meta, error) {
	var m meta
	var seen bool
	version := uint64(stateVersion)
	err := eachItem(sr, pc, func(d *dec) {
		if seen {
			d.fail("more than one item")
			return
		}
		seen = true
		if v := d.u("state version"); d.err == "" && v != stateVersion {
			version = v
			d.fail("another state version") // the fields after it are that version's
			return
		}
		m.lastTime = d.nonNeg(d.v("lastTime"), "lastTime")
		m.genHigh = d.u("genHigh")
		m.push = d.nonNeg(d.v("push"), "push")
		m.nusers = d.nonNeg(d.v("nusers"), "nusers")
		m.imported = engine.ImportSpan{Lo: d.u("imported lo"), Hi: d.u("imported hi")}
		if d.err == "" && (m.imported.Lo > m.imported.Hi || m.imported.Hi == 0 && m.imported.Lo != 0) {
			d.fail("import span out of order")
		}
	})
	switch {
	case version != stateVersion:
		return m, &engine.FormatError{Format: "snapshot state", Found: version, Want: stateVersion}
	case err == nil && !seen:
		err = sr.Corrupt("no item")
	}
	return m, err
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
// the snapshot (snapshot.Writer's byte stream, a chunk an item), pacing
// the writer as it goes.
type chunkWriter struct {
	w   *snapshot.Writer
	p   *pacer
	err error
}

func (c *chunkWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.step()
	return n, err
}

// fail records an error of the body's own writer; close reports it.
func (c *chunkWriter) fail(err error) { c.err = err }

func (c *chunkWriter) close() {
	if c.err != nil {
		c.w.Fail(c.err)
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

func writeMeta(e *enc, c *cut) {
	e.start()
	e.u(stateVersion)
	e.v(c.lastTime)
	e.u(c.genHigh)
	e.v(c.st.push)
	e.v(c.st.nusers)
	e.u(c.st.imported.Lo)
	e.u(c.st.imported.Hi)
	e.end()
}
