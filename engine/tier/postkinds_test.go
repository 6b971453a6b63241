package tier

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/snowflake"
)

// TestPostKinds: a post table's kinds are reconciled with a
// configuration, kept in its snapshot image (across window lengths too),
// and refuse a kind left out whose reactions are counted, wherever the
// counts are (open, sealed, cold).
func TestPostKinds(t *testing.T) {
	dir := t.TempDir()
	opts := testOpts(dir)
	tr, _ := NewPosts(opts)
	if err := tr.SetKinds([]string{"like", "love", "haha"}); err != nil {
		t.Fatal(err)
	}
	kinds := tr.Kinds()
	love, haha := kinds.ID("love"), kinds.ID("haha")
	ids := []uint64{
		snowflake.Make(testEpoch.UnixMilli(), 1, 0),        // cold by the end
		snowflake.Make(testEpoch.UnixMilli()+12_500, 1, 0), // sealed
		snowflake.Make(testEpoch.UnixMilli()+20_000, 1, 0), // open
	}
	if _, _, err := moveReaction(tr, ids[0], counters.NoKind, 7); err == nil {
		t.Fatal("a reaction of a kind not in the table")
	}
	for i, id := range ids {
		tr.Put(id, Post{Author: 9})
		for range i + 1 {
			if _, _, err := moveReaction(tr, id, counters.NoKind, love); err != nil {
				t.Fatal(err)
			}
		}
		was, is, err := moveReaction(tr, id, love, haha) // a switch
		if err != nil || was.Count(love) != int64(i+1) || is.Count(love) != int64(i) || is.Count(haha) != 1 {
			t.Fatalf("switch: %+v -> %+v %v", was, is, err)
		}
		if _, is, _ := moveReaction(tr, id, counters.NoKind, counters.Like); is.Counts.Likes != 1 {
			t.Fatalf("a like: %+v", is)
		}
	}
	if err := tr.Maintain(testEpoch.Add(17 * time.Second)); err != nil {
		t.Fatal(err)
	}
	forms := map[Kind]int{}
	for _, s := range tr.Stats() {
		forms[s.Kind]++
	}
	if forms[Open] != 1 || forms[Sealed] != 1 || forms[Cold] != 1 {
		t.Fatalf("windows %v", forms)
	}
	totals, err := tr.KindTotals()
	if err != nil || totals[counters.Like] != 3 || totals[love] != 0+1+2 || totals[haha] != 3 {
		t.Fatalf("KindTotals %v %v", totals, err)
	}
	err = tr.SetKinds([]string{"like", "haha", "wow"})
	var inUse *counters.KindInUseError
	if !errors.As(err, &inUse) || inUse.Name != "love" || inUse.Count != 3 {
		t.Fatalf("love left out: %v", err)
	}
	if k := tr.Kinds(); k.ID("wow") != counters.NoKind {
		t.Fatal("a refused configuration changed the kinds")
	}
	if err := tr.SetKinds([]string{"like", "love", "haha", "wow"}); err != nil {
		t.Fatal(err)
	}
	want := tr.Kinds()
	var img bytes.Buffer
	if _, err := tr.WriteTo(&img); err != nil {
		t.Fatal(err)
	}
	again, _ := NewPosts(opts)
	if err := again.Load(bytes.NewReader(img.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got := again.Kinds(); got != want {
		t.Fatalf("kinds after Load %v, want %v", got.IDs(), want.IDs())
	}
	if p, ok, err := again.Get(ids[1]); err != nil || !ok || p.Count(love) != 1 || p.Count(haha) != 1 {
		t.Fatalf("after Load: %+v %v %v", p, ok, err)
	}
	// Another window length: the records are imported, the kinds kept.
	o := opts
	o.WindowMillis = 2000
	other, _ := NewPosts(o)
	if err := other.LoadAnyWindow(bytes.NewReader(img.Bytes()), testEpoch.Add(17*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := other.Kinds(); got != want || other.Len() != 3 {
		t.Fatalf("LoadAnyWindow: kinds %v, %d posts", got.IDs(), other.Len())
	}
	// Every love gone: love may be left out, its id freed.
	for i, id := range ids[1:] {
		for range i + 1 {
			moveReaction(again, id, love, counters.NoKind)
		}
	}
	if err := again.SetKinds([]string{"like", "haha", "sad"}); err != nil {
		t.Fatal(err)
	}
	if k := again.Kinds(); k.ID("love") != counters.NoKind || k.ID("sad") != love {
		t.Fatalf("kinds %v", k.IDs())
	}
}
