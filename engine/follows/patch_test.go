package follows

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPatch inserts and removes pairs in blocks of random shape through
// patchInsert and patchRemove, checking each patched block against the
// pairs it should hold, and that the patch, not the fallback, is what
// most changes take: a value that does not fit its column is the only
// reason for a fallback here, and the new values are drawn from the
// block's own widths most of the time.
func TestPatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	var tried, fell int
	for iter := range 4000 {
		e := randomBlock(rng, iter)
		if !ascending(e) || e.n < 2 {
			continue
		}
		var p pairs
		bd := builder{p: &p}
		for i := range e.n {
			bd.add(e.a[i], e.b[i], e.v[i])
		}
		bd.flush()
		want := e
		var a, b uint64
		var res patchResult
		i := 1 + rng.IntN(e.n-1)
		insert := iter%2 == 0 && e.n < maxBlock
		if insert {
			// Near pair i: in its run, between it and the next, or a run
			// of its own after it; a duplicate now and then.
			a, b = e.a[i], e.b[i]+uint64(rng.IntN(3))
			if rng.IntN(3) == 0 && a+1 != 0 {
				a, b = a+1, e.b[i]>>rng.IntN(64)
			}
			if b < e.b[i] { // wrapped
				continue
			}
			v := e.v[i] + int64(rng.IntN(3)) - 1
			if rng.IntN(4) == 0 {
				v = randomValue(rng, rng.IntN(65))
			}
			res = p.patchInsert(pos{}, a, b, v)
			k := 0
			for k < e.n && less(e.a[k], e.b[k], a, b) {
				k++
			}
			if k < e.n && e.a[k] == a && e.b[k] == b {
				if res != unchanged {
					t.Fatalf("iter %d: insert of (%d, %d), there already: %v", iter, a, b, res)
				}
				continue
			}
			want = &entries{}
			*want = *e
			want.shift(k, 1)
			want.a[k], want.b[k], want.v[k] = a, b, v
		} else {
			a, b = e.a[i], e.b[i]
			var more bool
			res, more = p.patchRemove(pos{}, a, b)
			wantMore := e.a[i-1] == a || i+1 < e.n && e.a[i+1] == a
			if res == patched && more != wantMore {
				t.Fatalf("iter %d: remove of (%d, %d): more %v", iter, a, b, more)
			}
			want = &entries{}
			*want = *e
			want.shift(i+1, -1)
		}
		tried++
		switch res {
		case fallback:
			fell++
			continue
		case unchanged:
			t.Fatalf("iter %d: %v of (%d, %d) changed nothing", iter, insert, a, b)
		}
		p.n = want.n
		if err := p.check(); err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		var got entries
		p.decode(pos{}, &got, &p.enc.cols)
		if got.n != want.n || !slices.Equal(got.a[:got.n], want.a[:want.n]) ||
			!slices.Equal(got.b[:got.n], want.b[:want.n]) || !slices.Equal(got.v[:got.n], want.v[:want.n]) {
			t.Fatalf("iter %d: insert %v of (%d, %d): block holds %v %v %v, want %v %v %v", iter, insert, a, b,
				got.a[:got.n], got.b[:got.n], got.v[:got.n], want.a[:want.n], want.b[:want.n], want.v[:want.n])
		}
	}
	if fell*3 > tried {
		t.Fatalf("%d of %d changes fell back to encoding the block", fell, tried)
	}
	t.Logf("%d changes, %d fell back", tried, fell)
}

// TestPatchKeepsWidths checks that unfollows patch the block, which keeps
// its values column as wide as it was (an encode would narrow it), that a
// follow whose snapshot is too wide for the fields becomes an exception,
// and that one below the column's base makes the block encode again.
func TestPatchKeepsWidths(t *testing.T) {
	s := New()
	m := model{}
	for u := range uint64(100) {
		s.Follow(1, u*3, int64(u))
		m.follow(1, u*3, int64(u))
	}
	values := func() column {
		var blk block
		s.fwd.parse(s.fwd.entry(pos{}), &blk)
		return blk.cols[colValues]
	}
	if c := values(); c.w != 7 {
		t.Fatalf("values in 7 bits expected, got %d", c.w)
	}
	for u := uint64(64); u < 100; u++ {
		s.Unfollow(1, u*3)
		delete(m[1], u*3)
	}
	compare(t, s, m)
	if c := values(); c.w != 7 {
		t.Fatalf("unfollows did not patch the block: values %d bits wide", c.w)
	}
	s.Follow(1, 300, 1<<40) // after the last: its delta fits as an exception too
	m.follow(1, 300, 1<<40)
	compare(t, s, m)
	if c := values(); c.w != 7 || c.ne != 1 {
		t.Fatalf("a wide snapshot: values %d bits wide with %d exceptions, want 7 and 1", c.w, c.ne)
	}
	s.Follow(1, 400, -1000)
	m.follow(1, 400, -1000)
	compare(t, s, m)
	if c := values(); c.w == 7 {
		t.Fatal("a snapshot below the values' base did not encode the block again")
	}
}
