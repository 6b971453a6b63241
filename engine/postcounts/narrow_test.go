package postcounts

import (
	"math"
	"math/rand/v2"
	"testing"
)

// edgeValue returns a count near a field-width boundary, or a small one:
// the values where narrow fields escape and come back.
func edgeValue(rng *rand.Rand) int64 {
	switch rng.IntN(6) {
	case 0:
		return int64(rng.IntN(4))
	case 1:
		return int64(rng.IntN(300))
	case 2:
		k := []int{6, 7, 8, 9, 10, 11, 14, 15, 16, 25, 26, 27, 31, 32, 33, 40, 62}[rng.IntN(17)]
		return int64(1)<<k + int64(rng.IntN(5)) - 2
	case 3:
		return math.MaxInt64 - int64(rng.IntN(3))
	case 4:
		return rng.Int64()
	}
	return int64(rng.IntN(70000))
}

func checkNarrow(t *testing.T, tb *narrow, model map[uint64]vals) {
	t.Helper()
	for k, v := range model {
		got, ok := tb.get(k)
		if !ok || got != v {
			t.Fatalf("get(%d) = %v %v, want %v", k, got, ok, v)
		}
	}
	if tb.len() != len(model) {
		t.Fatalf("len = %d, want %d", tb.len(), len(model))
	}
	n, esc := 0, 0
	tb.each(func(k uint64, v vals) bool {
		n++
		if model[k] != v || v == (vals{}) {
			t.Fatalf("each: %d = %v, model %v", k, v, model[k])
		}
		r, _ := tb.find(k)
		for f := range Field(NumFields) {
			if tb.field(r, f) == tb.escape(f) {
				esc++
				break
			}
		}
		return true
	})
	if n != len(model) {
		t.Fatalf("each saw %d, want %d", n, len(model))
	}
	// Every overflow entry belongs to an escaped record, and holds values
	// only for escaped fields.
	if tb.overflowed() != esc {
		t.Fatalf("overflow table has %d entries, %d records escape", tb.overflowed(), esc)
	}
	used := 0
	for gi := range tb.groups {
		for i := range groupSlots {
			if c := ctrlAt(tb.groups[gi].ctrl, i); c != ctrlEmpty {
				used++
			}
		}
	}
	if used != tb.used || tb.used > tb.limit() {
		t.Fatalf("used = %d, counted %d, limit %d", tb.used, used, tb.limit())
	}
}

func TestNarrowModel(t *testing.T) {
	for _, signed := range []bool{false, true} {
		for _, keyBits := range []uint{22, 49, 56} {
			lay := newLayout(keyBits)
			tb := newNarrow(lay, signed)
			model := map[uint64]vals{}
			rng := rand.New(rand.NewPCG(uint64(keyBits), 1))
			keys := make([]uint64, 3000)
			for i := range keys {
				keys[i] = rng.Uint64() & lay.keyMask
			}
			keys[0], keys[1] = 0, lay.keyMask
			for step := range 60000 {
				k := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(10); {
				case op < 4 && !signed:
					f := Field(rng.IntN(NumFields))
					d := edgeValue(rng)
					if rng.IntN(2) == 0 {
						d = -d
					}
					v := model[k]
					v[f] = clampAdd(v[f], d)
					if got := tb.add(k, f, d); got != v[f] {
						t.Fatalf("add(%d, %v, %d) = %d, want %d", k, f, d, got, v[f])
					}
					setModel(model, k, v)
				case op < 8:
					var v vals
					if rng.IntN(4) > 0 {
						for f := range v {
							if rng.IntN(2) == 0 {
								v[f] = edgeValue(rng)
								if signed && rng.IntN(2) == 0 {
									v[f] = -v[f]
								}
							}
						}
					}
					tb.put(k, &v)
					setModel(model, k, v)
				default:
					_, had := model[k]
					if tb.del(k) != had {
						t.Fatalf("del(%d) != %v", k, had)
					}
					delete(model, k)
				}
				if step%5000 == 0 {
					checkNarrow(t, tb, model)
					c := tb.clone()
					checkNarrow(t, c, model)
					c.put(keys[0], &vals{1, 2, 3, 4, 5})
					if got, _ := tb.get(keys[0]); got != model[keys[0]] {
						t.Fatal("clone shares state with its original")
					}
				}
			}
			checkNarrow(t, tb, model)
			// Deleting everything shrinks the table at its next rehash.
			for k := range model {
				tb.del(k)
			}
			tb.put(1, &vals{1})
			checkNarrow(t, tb, map[uint64]vals{1: {1}})
		}
	}
}

func setModel(m map[uint64]vals, k uint64, v vals) {
	if v == (vals{}) {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// TestNarrowTombstones fills a table, then churns inserts and deletes at a
// steady size: the table must neither grow without bound nor lose keys.
func TestNarrowTombstones(t *testing.T) {
	tb := newNarrow(newLayout(49), false)
	model := map[uint64]vals{}
	rng := rand.New(rand.NewPCG(7, 7))
	var live []uint64
	for range 1000 {
		k := rng.Uint64() >> 15
		tb.put(k, &vals{0, 0, 0, 1})
		model[k] = vals{0, 0, 0, 1}
		live = append(live, k)
	}
	size := len(tb.groups)
	for range 200000 {
		i := rng.IntN(len(live))
		tb.del(live[i])
		delete(model, live[i])
		k := rng.Uint64() >> 15
		tb.put(k, &vals{0, 0, 0, 1})
		model[k] = vals{0, 0, 0, 1}
		live[i] = k
	}
	checkNarrow(t, tb, model)
	if len(tb.groups) > 2*size {
		t.Fatalf("table grew from %d to %d groups at a steady %d entries", size, len(tb.groups), len(model))
	}
}

func TestNarrowLoad(t *testing.T) {
	tb := newNarrow(newLayout(49), false)
	for i := range uint64(100000) {
		tb.put(i*7919, &vals{0, 0, 0, 1})
		load := float64(tb.used) / float64(len(tb.groups)*groupSlots)
		if i > 100 && (load > 0.875 || load < 0.68) {
			t.Fatalf("load %.3f at %d entries", load, i+1)
		}
	}
}

func TestNarrowNoAlloc(t *testing.T) {
	tb := newNarrow(newLayout(49), false)
	for i := range uint64(1000) {
		tb.put(i, &vals{1, 2, 3, 4, 5})
	}
	if n := testing.AllocsPerRun(100, func() {
		for i := range uint64(1000) {
			tb.add(i, Views, 1)
			tb.get(i + 500)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
