package tier

import (
	"github.com/tally-dev/tally/engine/counters"
)

// The post table's reaction kinds: the kinds table (counters.Kinds) that
// names the ids its rows and blocks count reactions by. It is kept in
// the table's snapshot image, so that the ids mean the same after a
// restart whatever the configuration's order, and a table starts with
// like alone.

// Kinds returns the table's kinds.
func (p *Posts) Kinds() counters.Kinds { return p.kinds }

// SetKinds makes the table's kinds those of a deployment configured with
// kinds (counters.ParseKinds' result), as counters.Kinds.Reconcile says:
// new kinds get ids, a kind left out whose reactions are still counted is
// refused with a *counters.KindInUseError naming it and its count (which
// walks every post: KindTotals), one with none is dropped. Call it after
// Load, under the write lock.
func (p *Posts) SetKinds(kinds []string) error {
	next, err := p.kinds.Reconcile(kinds, p.KindTotals)
	if err != nil {
		return err
	}
	p.kinds = next
	return nil
}

// PutKinds makes k the table's kinds as it stands: a log's record of a
// reconciliation (SetKinds' result) replayed. Under the write lock.
func (p *Posts) PutKinds(k counters.Kinds) { p.kinds = k }

// KindTotals returns the count of each reaction kind summed over every
// post (saturating), by kind id: Totals[Like] is every post's likes. It
// walks every record, cold files included (Range), and only reads.
func (p *Posts) KindTotals() (counters.Totals, error) {
	var t counters.Totals
	err := p.Range(func(_ uint64, r Post) bool {
		t[counters.Like] = counters.Add(t[counters.Like], r.Counts.Likes)
		for j, c := range r.Reactions {
			t[j+2] = counters.Add(t[j+2], c)
		}
		return true
	})
	return t, err
}

// A post table's snapshot image starts with its kinds table:
//
//	kinds = count uvarint | (id uint8 | name length uvarint | name)*   in id order

func (p *Posts) head() func(*snapshotWriter) {
	// A copy (the table is an array): a View writes it with no lock
	// while the live table's kinds may change.
	kinds := p.kinds
	return func(sw *snapshotWriter) { writeKinds(sw, kinds) }
}

func writeKinds(sw *snapshotWriter, kinds counters.Kinds) {
	ids := kinds.IDs()
	sw.uvarint(uint64(len(ids)))
	for _, id := range ids {
		name := kinds.Name(id)
		sw.buf = append(sw.buf, byte(id))
		sw.uvarint(uint64(len(name)))
		sw.buf = append(sw.buf, name...)
	}
}

func (p *Posts) readHead(sr *snapshotReader) func() {
	n := sr.count("kinds")
	var k counters.Kinds
	last := counters.NoKind
	for range n {
		id := counters.Kind(sr.byte())
		name := sr.bytes(sr.uvarint())
		if sr.err != nil {
			return nil
		}
		if id <= last {
			sr.fail("reaction kind ids out of order")
			return nil
		}
		if err := k.Put(id, string(name)); err != nil {
			sr.fail("%v", err)
			return nil
		}
		last = id
	}
	if sr.err == nil && !k.Has(counters.Like) {
		sr.fail("the kinds table has no like")
	}
	return func() { p.kinds = k }
}
