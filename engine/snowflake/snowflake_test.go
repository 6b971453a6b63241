package snowflake

import (
	"sync"
	"testing"
	"time"
)

func TestLayout(t *testing.T) {
	// One millisecond after Twitter's epoch (2010-11-04T01:42:54.657Z),
	// node 0, sequence 0.
	if got := Time(1 << TimeShift); !got.Equal(time.Date(2010, 11, 4, 1, 42, 54, 658e6, time.UTC)) {
		t.Fatalf("Time(1<<22) = %v", got)
	}
	want := time.Date(2019, 12, 31, 19, 26, 16, 975e6, time.UTC)
	id := Make(want.UnixMilli(), 1023, 4095)
	if Millis(id) != want.UnixMilli() || id>>SeqBits&MaxNode != 1023 || id&4095 != 4095 {
		t.Fatalf("Make round trip: %d", id)
	}
	now := time.Now()
	for id, ok := range map[uint64]bool{1: false, 0: false, 1<<64 - 1: false, Make(now.UnixMilli(), 0, 0): true, Make(now.Add(time.Hour).UnixMilli(), 0, 0): false} {
		if Valid(id, now, time.Minute) != ok {
			t.Errorf("Valid(%d) != %v", id, ok)
		}
	}
}

func TestGeneratorIncreasesAcrossClockSteps(t *testing.T) {
	clock := time.Now()
	g := &Generator{Node: 3, Now: func() time.Time { return clock }}
	last := g.Next()
	for i := range 10000 {
		if i == 5000 {
			clock = clock.Add(-time.Hour) // the wall clock steps back
		}
		id := g.Next()
		if id <= last {
			t.Fatalf("id %d after %d", id, last)
		}
		last = id
	}
	g.Observe(last + 1<<TimeShift)
	if id := g.Next(); id <= last+1<<TimeShift {
		t.Fatal("Observe did not move the generator past the observed id")
	}
}

func TestGeneratorConcurrentUnique(t *testing.T) {
	var g Generator
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5000 {
				id := g.Next()
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
