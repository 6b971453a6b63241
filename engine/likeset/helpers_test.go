package likeset

import "testing"

func (t *pairTable) check(tb testing.TB) {
	if t == nil {
		return
	}
	n := 0
	for i := range t.n {
		lo, hi := t.slot(i)
		if lo == 0 {
			continue
		}
		n++
		u, k := t.unpack(lo, hi)
		j, ok := t.find(u, k)
		if !ok || j != i {
			tb.Fatalf("slot %d (%d,%d) not found (%d %v)", i, u, k, j, ok)
		}
	}
	if n != t.live || t.live*4 > t.n*3 {
		tb.Fatalf("live %d counted %d n %d", t.live, n, t.n)
	}
}

func checkTables(tb testing.TB, s *Set) {
	for _, w := range s.wins {
		w.open.check(tb)
		for _, d := range []*delta{w.frozen, w.live} {
			if d != nil {
				d.adds.check(tb)
				d.dels.check(tb)
			}
		}
	}
}
