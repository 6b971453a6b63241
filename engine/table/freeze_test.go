package table

import (
	"maps"
	"math/rand/v2"
	"testing"
)

// checkView compares a frozen table's view (Get, Len, Range) with model,
// and the overlay's own slots with the table's bookkeeping.
func checkView(t *testing.T, tb *Table[uint64, uint64], model map[uint64]uint64) {
	t.Helper()
	if tb.Len() != len(model) {
		t.Fatalf("Len=%d, model has %d", tb.Len(), len(model))
	}
	for k, want := range model {
		if got, ok := tb.Get(k); !ok || got != want {
			t.Fatalf("Get(%d) = %d, %v; want %d", k, got, ok, want)
		}
	}
	seen := map[uint64]bool{}
	tb.Range(func(k, v uint64) bool {
		if seen[k] {
			t.Fatalf("Range yielded %d twice", k)
		}
		seen[k] = true
		if want, ok := model[k]; !ok || want != v {
			t.Fatalf("Range yielded %d=%d, model has %d, %v", k, v, want, ok)
		}
		return true
	})
	if len(seen) != len(model) {
		t.Fatalf("Range yielded %d entries, want %d", len(seen), len(model))
	}
}

// TestFreezeModel runs random writes against a map, freezing and thawing
// at random: the table answers as the map throughout, and the frozen
// entries stay as the map was at Freeze until Thaw.
func TestFreezeModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		tb := New[uint64, uint64](u64, 0)
		model := map[uint64]uint64{}
		var frozen *Table[uint64, uint64]
		var atFreeze map[uint64]uint64
		keys := uint64(50 + rng.IntN(2000))
		for step := range 20000 {
			k := rng.Uint64N(keys)
			switch op := rng.IntN(100); {
			case op < 2 && frozen == nil:
				frozen, atFreeze = tb.Freeze(), maps.Clone(model)
				check(t, frozen, atFreeze)
			case op < 4 && frozen != nil:
				check(t, frozen, atFreeze)
				tb.Thaw()
				frozen = nil
				check(t, tb, model)
			case op < 40:
				v := rng.Uint64()
				tb.Put(k, v)
				model[k] = v
			case op < 55:
				if p, ok := tb.Ref(k); ok {
					*p++
					model[k]++
				} else if _, in := model[k]; in {
					t.Fatalf("step %d: Ref(%d) missed", step, k)
				}
			case op < 65:
				*tb.Upsert(k) += 3
				model[k] += 3
			default:
				_, in := model[k]
				if got := tb.Delete(k); got != in {
					t.Fatalf("step %d: Delete(%d) = %v, want %v", step, k, got, in)
				}
				delete(model, k)
			}
			if step%997 == 0 {
				checkView(t, tb, model)
			}
		}
		if frozen != nil {
			check(t, frozen, atFreeze)
			tb.Thaw()
		}
		check(t, tb, model)
	}
}

// TestThawEitherWay thaws a small overlay into a large table and a large
// overlay over a small one: both end as the model.
func TestThawEitherWay(t *testing.T) {
	for _, before := range []int{10, 5000} {
		tb := New[uint64, uint64](u64, 0)
		model := map[uint64]uint64{}
		for i := range uint64(before) {
			tb.Put(i, i)
			model[i] = i
		}
		frozen := tb.Freeze()
		for i := uint64(0); i < 5010; i += 2 {
			tb.Put(i, i+1)
			model[i] = i + 1
		}
		tb.Delete(1)
		delete(model, 1)
		check(t, frozen, nil)
		if frozen.Len() != before {
			t.Fatalf("frozen table changed: %d entries, want %d", frozen.Len(), before)
		}
		tb.Thaw()
		if tb.Frozen() {
			t.Fatal("still frozen after Thaw")
		}
		check(t, tb, model)
	}
}

// TestFrozenReset: Reset of a frozen table empties it and ends the
// freeze, leaving the frozen entries as they were.
func TestFrozenReset(t *testing.T) {
	tb := New[uint64, uint64](u64, 0)
	tb.Put(1, 1)
	frozen := tb.Freeze()
	tb.Put(2, 2)
	tb.Reset()
	if tb.Len() != 0 || tb.Frozen() {
		t.Fatalf("Reset left %d entries, frozen %v", tb.Len(), tb.Frozen())
	}
	if v, ok := frozen.Get(1); !ok || v != 1 || frozen.Len() != 1 {
		t.Fatal("Reset changed the frozen entries")
	}
	tb.Thaw() // not frozen any more: nothing to do
	check(t, tb, map[uint64]uint64{})
}

func TestFreezeTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a second Freeze did not panic")
		}
	}()
	tb := New[uint64, uint64](u64, 0)
	tb.Freeze()
	tb.Freeze()
}
