package transport

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// timed records when the wheel called it.
type timed struct {
	entry wheelEntry
	mu    sync.Mutex
	fired []time.Time
	again func(now time.Time) time.Time // the next deadline it asks for (zero: none)
	w     *wheel
}

func (d *timed) onDeadline(now time.Time) {
	d.mu.Lock()
	d.fired = append(d.fired, time.Now())
	again := d.again
	d.mu.Unlock()
	if again != nil {
		d.w.schedule(&d.entry, again(now))
	}
}

func (d *timed) times() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.fired...)
}

func newTimed(w *wheel) *timed {
	d := &timed{w: w}
	d.entry.init(d)
	return d
}

func TestWheelFiresNotBeforeAndAtMostTwoTicksAfter(t *testing.T) {
	const tick = 10 * time.Millisecond
	w := newWheel(tick)
	start := time.Now()
	var all []*timed
	var at []time.Time
	for i := range 40 {
		d := newTimed(w)
		when := start.Add(time.Duration(i*7) * time.Millisecond)
		w.schedule(&d.entry, when)
		all, at = append(all, d), append(at, when)
	}
	// Rescheduled: only the last deadline counts; removed: none.
	w.schedule(&all[0].entry, start.Add(150*time.Millisecond))
	at[0] = start.Add(150 * time.Millisecond)
	w.remove(&all[1].entry)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(all[39].times()) == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	for i, d := range all {
		fired := d.times()
		if i == 1 {
			if len(fired) != 0 {
				t.Fatalf("removed entry fired %d times", len(fired))
			}
			continue
		}
		if len(fired) != 1 {
			t.Fatalf("entry %d fired %d times", i, len(fired))
		}
		if fired[0].Before(at[i]) {
			t.Fatalf("entry %d fired %v before its deadline", i, at[i].Sub(fired[0]))
		}
		// Two ticks, and what a busy machine adds to a ticker's wake-up.
		if late := fired[0].Sub(at[i]); late > 2*tick+200*time.Millisecond {
			t.Fatalf("entry %d fired %v after its deadline", i, late)
		}
	}
}

// A deadline beyond one turn of the wheel waits through whole turns; an
// owner may schedule itself again from its callback; the ticking goroutine
// ends when the wheel is empty.
func TestWheelTurnsAndStops(t *testing.T) {
	const tick = time.Millisecond
	before := runtime.NumGoroutine()
	w := newWheel(tick)
	far := newTimed(w)
	farAt := time.Now().Add((wheelSlots + 20) * tick)
	w.schedule(&far.entry, farAt)
	repeat := newTimed(w)
	n := 0
	repeat.again = func(now time.Time) time.Time {
		if n++; n == 3 {
			return time.Time{}
		}
		return now.Add(5 * tick)
	}
	w.schedule(&repeat.entry, time.Now().Add(5*tick))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(far.times()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if f := far.times(); len(f) != 1 || f[0].Before(farAt) {
		t.Fatalf("an entry past one turn fired %v (deadline %v)", f, farAt)
	}
	if r := repeat.times(); len(r) != 3 {
		t.Fatalf("a rescheduling entry fired %d times, want 3", len(r))
	}
	for time.Now().Before(deadline) && runtime.NumGoroutine() > before {
		time.Sleep(5 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Fatalf("%d goroutines, %d before: the empty wheel still ticks", g, before)
	}
	// It starts again with the next entry.
	again := newTimed(w)
	w.schedule(&again.entry, time.Now().Add(2*tick))
	for time.Now().Before(deadline) && len(again.times()) == 0 {
		time.Sleep(time.Millisecond)
	}
	if len(again.times()) != 1 {
		t.Fatal("the wheel did not start again")
	}
}
