package tier

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// TestLoadAnyWindow: an image of the post table and of a set written with
// 1 s windows loads into tables of 7 s windows (and back) with the same
// records; an image of the table's own length loads as Load does, and a
// damaged one is refused either way.
func TestLoadAnyWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	now := testEpoch.Add(40 * time.Second)
	for _, lengths := range [][2]int64{{testWindow, 7 * testWindow}, {7 * testWindow, testWindow}, {testWindow, testWindow}} {
		from, to := Options{WindowMillis: lengths[0], OpenAge: 3 * time.Second}, Options{WindowMillis: lengths[1], OpenAge: 3 * time.Second}
		posts, _ := NewPosts(from)
		set, _ := NewSet("LIKE", from)
		model := map[uint64]Post{}
		pairs := map[[2]uint64]bool{}
		for range 3000 {
			id := randID(rng, 30)
			p := randPost(rng)
			model[id] = p
			if err := posts.Put(id, p); err != nil {
				t.Fatal(err)
			}
			u := rng.Uint64N(50)
			pairs[[2]uint64{u, id}] = true
			if _, err := set.Add(u, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := posts.Maintain(now); err != nil {
			t.Fatal(err)
		}
		if err := set.Maintain(now); err != nil {
			t.Fatal(err)
		}
		var pimg, simg bytes.Buffer
		if _, err := posts.WriteTo(&pimg); err != nil {
			t.Fatal(err)
		}
		if _, err := set.WriteTo(&simg); err != nil {
			t.Fatal(err)
		}
		posts2, _ := NewPosts(to)
		set2, _ := NewSet("LIKE", to)
		if err := posts2.LoadAnyWindow(bytes.NewReader(pimg.Bytes()), now); err != nil {
			t.Fatalf("%v: posts: %v", lengths, err)
		}
		if err := set2.LoadAnyWindow(bytes.NewReader(simg.Bytes()), now); err != nil {
			t.Fatalf("%v: set: %v", lengths, err)
		}
		check(t, posts2, model, rng, 30)
		if set2.Len() != len(pairs) {
			t.Fatalf("%v: %d pairs, want %d", lengths, set2.Len(), len(pairs))
		}
		for pr := range pairs {
			if has, err := set2.Has(pr[0], pr[1]); err != nil || !has {
				t.Fatalf("%v: pair %v: %v %v", lengths, pr, has, err)
			}
		}
		damaged := bytes.Clone(pimg.Bytes())
		damaged[len(damaged)/2] ^= 1
		if err := (must(NewPosts(to))).LoadAnyWindow(bytes.NewReader(damaged), now); err == nil {
			t.Fatalf("%v: a damaged image loaded", lengths)
		}
		if err := posts2.LoadAnyWindow(bytes.NewReader(pimg.Bytes()), now); lengths[0] != lengths[1] && err == nil {
			t.Fatalf("%v: an image of other windows loaded into a table that holds records", lengths)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
