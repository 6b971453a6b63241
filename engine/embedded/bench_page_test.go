package embedded

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// BenchmarkEnginePage reads 50-post pages through Engine.Page — existence,
// author and counts, as the GraphQL layer's page plan asks — from an
// engine that imported bench/datagen's set with authors (N =
// TALLY_BENCH_N, default 1M; every post has an author, 40% have counts),
// the clock at the set's end and the default policy: the last 7 days open,
// the rest sealed. Each page is 50 consecutive posts by id (within a day
// or two); "sealed"
// pages are from days before the last 7, "open" ones from the last 7.
// heap_B/post is the live heap after GC per post, the engine built;
// table_B/post the post table's own count of its bytes, authors_B/post
// that of the authors' post counts (the per-user records of a user who
// only posts).
//
//	go test ./engine/embedded -run '^$' -bench EnginePage
//	TALLY_BENCH_N=10000000 go test ./engine/embedded -run '^$' -bench EnginePage
func BenchmarkEnginePage(b *testing.B) {
	n := benchutil.N()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := Open(Options{Now: func() time.Time { return datagen.DefaultEnd }, SweepInterval: -1, MaintainInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	g := datagen.New(datagen.Config{N: n, Seed: 1})
	a := datagen.NewAuthors(datagen.AuthorConfig{Seed: 1})
	var ids []engine.PostID
	var someAuthors []engine.UserID // every 97th row's author: popular authors come up often
	rows := make([]engine.ImportRow, 0, MaxImportBatch)
	flush := func() {
		if err := e.Import(bg, rows); err != nil {
			b.Fatal(err)
		}
		rows = rows[:0]
	}
	for {
		id, c, ok := g.Next()
		if !ok {
			break
		}
		ids = append(ids, engine.PostID(id))
		author := a.Next()
		if len(ids)%97 == 0 {
			someAuthors = append(someAuthors, author)
		}
		rows = append(rows, engine.ImportRow{Post: engine.PostID(id), Author: author, Counts: c})
		if len(rows) == cap(rows) {
			flush()
		}
	}
	flush()
	e.maintain()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) - float64(cap(ids)*8)
	table, authors := float64(e.st.posts.MemoryBytes()), float64(e.st.posted.MemoryBytes())
	slices.Sort(ids)
	sealed, open := sealedAndOpenPages(ids, 97) // spread over the set
	out := make([]engine.PostView, 50)
	for _, c := range []struct {
		name  string
		pages [][]engine.PostID
	}{{"sealed", sealed}, {"open", open}} {
		b.Run(fmt.Sprintf("%s/posts=%d", c.name, n), func(b *testing.B) {
			if len(c.pages) == 0 {
				b.Skip("no pages")
			}
			i := 0
			for b.Loop() {
				if err := e.Page(bg, 0, c.pages[i%len(c.pages)], engine.PageWant{Counts: true}, out); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(heap/float64(n), "heap_B/post")
			b.ReportMetric(table/float64(n), "table_B/post")
			b.ReportMetric(authors/float64(n), "authors_B/post")
		})
	}
	// A badge poll reads each followee's post count (the feed's unread).
	// Viewers follow k distinct authors of the set each, 200k follows in
	// all, and are polled in turn, so that the polls do not find the
	// same few cache lines warm.
	for _, k := range []int{100, 500, 2000} {
		viewers := make([]engine.UserID, 200_000/k)
		next := 0
		for v := range viewers {
			viewers[v] = engine.UserID(1<<40 + k<<20 + v)
			seen := map[engine.UserID]bool{}
			for len(seen) < k {
				t := someAuthors[next%len(someAuthors)]
				next += 7919
				if !seen[t] {
					seen[t] = true
					if err := e.Follow(bg, viewers[v], t); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		e.maintain()
		b.Run(fmt.Sprintf("unread/followees=%d/posts=%d", k, n), func(b *testing.B) {
			i := 0
			start := cpuTime()
			for b.Loop() {
				if _, err := e.Unread(bg, viewers[i%len(viewers)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportCPU(b, start)
		})
	}
}

// sealedAndOpenPages cuts sorted ids into 50-post pages, every stride-th
// page, and splits them into those wholly older than the data set's last
// week (sealed windows under the default policy) and those wholly within
// it (open windows).
func sealedAndOpenPages(ids []engine.PostID, stride int) (sealed, open [][]engine.PostID) {
	openFrom := engine.PostID(snowflake.Make(datagen.DefaultEnd.Add(-7*24*time.Hour).UnixMilli(), 0, 0))
	for i := 0; i+50 <= len(ids); i += 50 * stride {
		page := ids[i : i+50]
		switch {
		case page[49] < openFrom:
			sealed = append(sealed, page)
		case page[0] >= openFrom:
			open = append(open, page)
		}
	}
	return sealed, open
}
