package sealed

import (
	"bytes"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine"
)

type post struct {
	id uint64
	c  engine.Counts
}

// genPosts returns the non-zero posts of a datagen set, in id order.
func genPosts(n int, seed uint64) (all []uint64, nonzero []post) {
	datagen.Each(datagen.Config{N: n, Seed: seed}, func(id uint64, c engine.Counts) {
		all = append(all, id)
		if !c.IsZero() {
			nonzero = append(nonzero, post{id, c})
		}
	})
	return all, nonzero
}

func build(t testing.TB, ps []post, opts Options) *Window {
	t.Helper()
	w, err := Build(func(yield func(uint64, engine.Counts) bool) {
		for _, p := range ps {
			if !yield(p.id, p.c) {
				return
			}
		}
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestRoundTripDatagen(t *testing.T) {
	all, ps := genPosts(200000, 1)
	for _, per := range []int{1, 2, 7, 128, 256} {
		w := build(t, ps, Options{BlockPosts: per})
		checkWindow(t, w, all, ps)
		data, _ := w.MarshalBinary()
		w2, err := Unmarshal(data)
		if err != nil {
			t.Fatalf("per=%d: Unmarshal: %v", per, err)
		}
		checkWindow(t, w2, all, ps)
		t.Logf("per=%d: %d posts, %d bytes, %.2f B/post", per, w.Len(), w.SizeBytes(), float64(w.SizeBytes())/float64(w.Len()))
	}
}

func checkWindow(t *testing.T, w *Window, all []uint64, ps []post) {
	t.Helper()
	checkWindowN(t, w, all, ps, 200)
}

// checkWindowN checks w against the posts it was built from, ps (the
// non-zero posts of all), with multi-gets of rounds random id sets.
func checkWindowN(t *testing.T, w *Window, all []uint64, ps []post, rounds int) {
	t.Helper()
	if w.Len() != len(ps) {
		t.Fatalf("Len = %d, want %d", w.Len(), len(ps))
	}
	want := make(map[uint64]engine.Counts, len(ps))
	for _, p := range ps {
		want[p.id] = p.c
	}
	for _, id := range all {
		if got := w.Get(id); got != want[id] {
			t.Fatalf("Get(%d) = %+v, want %+v", id, got, want[id])
		}
		for _, probe := range []uint64{id - 1, id + 1, id ^ 1<<20} {
			if got := w.Get(probe); got != want[probe] {
				t.Fatalf("Get(%d) = %+v, want %+v", probe, got, want[probe])
			}
		}
	}
	i := 0
	for id, c := range w.All() {
		if id != ps[i].id || c != ps[i].c {
			t.Fatalf("All()[%d] = %d %+v, want %d %+v", i, id, c, ps[i].id, ps[i].c)
		}
		i++
	}
	if i != len(ps) {
		t.Fatalf("All yielded %d posts, want %d", i, len(ps))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]uint64, 300)
	out := make([]engine.Counts, 300)
	if len(all) == 0 {
		return
	}
	for range rounds {
		n := rng.IntN(len(ids))
		for j := range n {
			ids[j] = all[rng.IntN(len(all))] + uint64(rng.IntN(2))
		}
		if rng.IntN(2) == 0 {
			slices.Sort(ids[:n])
		}
		w.GetMany(ids[:n], out)
		for j := range n {
			if out[j] != want[ids[j]] {
				t.Fatalf("GetMany: id %d = %+v, want %+v", ids[j], out[j], want[ids[j]])
			}
		}
	}
}

func TestExtremes(t *testing.T) {
	ps := []post{
		{0, engine.Counts{Likes: 1}},
		{1, engine.Counts{Views: math.MaxInt64}},
		{2, engine.Counts{Likes: math.MaxInt64, Comments: math.MaxInt64, Reposts: math.MaxInt64, Views: math.MaxInt64, Favorites: math.MaxInt64}},
		{1 << 40, engine.Counts{Favorites: 1 << 62}},
		{1<<63 + 5, engine.Counts{Comments: 3}},
		{math.MaxUint64 - 1, engine.Counts{Reposts: 1}},
		{math.MaxUint64, engine.Counts{Views: 1<<32 + 1}},
	}
	var all []uint64
	for _, p := range ps {
		all = append(all, p.id)
	}
	for _, per := range []int{1, 2, 3, 256} {
		checkWindow(t, build(t, ps, Options{BlockPosts: per}), all, ps)
	}
}

func TestEmptyWindow(t *testing.T) {
	w := build(t, nil, Options{})
	if w.Len() != 0 || w.Get(5) != (engine.Counts{}) {
		t.Fatalf("empty window: Len %d, Get %+v", w.Len(), w.Get(5))
	}
	data, _ := w.MarshalBinary()
	if len(data) != HeaderSize+FooterSize {
		t.Fatalf("empty window is %d bytes", len(data))
	}
	w2, err := Unmarshal(data)
	if err != nil || w2.Len() != 0 {
		t.Fatalf("Unmarshal(empty) = %v, %v", w2, err)
	}
	for range w2.All() {
		t.Fatal("empty window yielded a post")
	}
}

func TestWriterRejects(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, Options{})
	if err := w.Add(10, engine.Counts{Likes: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(10, engine.Counts{Likes: 1}); !errors.Is(err, ErrOrder) {
		t.Fatalf("duplicate id: %v, want ErrOrder", err)
	}
	w = NewWriter(&buf, Options{})
	w.Add(10, engine.Counts{Likes: 1})
	if err := w.Add(9, engine.Counts{}); !errors.Is(err, ErrOrder) {
		t.Fatalf("decreasing id with zero counts: %v, want ErrOrder", err)
	}
	w = NewWriter(&buf, Options{})
	if err := w.Add(10, engine.Counts{Views: -1}); err == nil {
		t.Fatal("negative count accepted")
	}
	// Zeros are skipped, not stored.
	win := build(t, []post{{1, engine.Counts{}}, {2, engine.Counts{Views: 3}}, {3, engine.Counts{}}}, Options{})
	if win.Len() != 1 || win.Index().MinID() != 2 || win.Index().MaxID() != 2 {
		t.Fatalf("zeros stored: Len %d, ids %d..%d", win.Len(), win.Index().MinID(), win.Index().MaxID())
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n--; f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriterWriteError(t *testing.T) {
	_, ps := genPosts(100000, 2)
	w := NewWriter(&failWriter{n: 1}, Options{})
	var err error
	for _, p := range ps {
		if err = w.Add(p.id, p.c); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write error not reported: %v", err)
	}
	if err2 := w.Close(); err2 == nil {
		t.Fatal("Close after a write error returned nil")
	}
}

// smallWindow is a window of a few blocks with varied contents.
func smallWindow(t testing.TB) (*Window, []uint64, []post) {
	all, ps := genPosts(2500, 9)
	ps = append(ps, post{all[len(all)-1] + 1<<30, engine.Counts{Views: math.MaxInt64, Likes: 1 << 40}})
	all = append(all, ps[len(ps)-1].id)
	return build(t, ps, Options{BlockPosts: 100}), all, ps
}

// TestEveryByteChecked flips each byte of a window in turn: every change
// must be refused by Unmarshal, since every byte is under a checksum or a
// checked constant.
func TestEveryByteChecked(t *testing.T) {
	w, _, _ := smallWindow(t)
	data, _ := w.MarshalBinary()
	for i := range data {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(data)
			bad[i] ^= x
			if _, err := Unmarshal(bad); err == nil {
				t.Fatalf("byte %d ^ %#x accepted", i, x)
			} else if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d: error %v does not wrap ErrCorrupt", i, err)
			}
		}
	}
	for n := range len(data) {
		if _, err := Unmarshal(data[:n]); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
}

func TestCorruptErrorNamesOffset(t *testing.T) {
	w, _, _ := smallWindow(t)
	data, _ := w.MarshalBinary()
	_, off, _ := w.Index().Block(2)
	data[off+5] ^= 0x10
	_, err := Unmarshal(data)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != int64(off) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("got %v, want a checksum error at block offset %d", err, off)
	}
}

// FuzzUnmarshal feeds arbitrary bytes to the window decoder. Whatever it
// accepts must behave: lookups agree with iteration and nothing panics.
func FuzzUnmarshal(f *testing.F) {
	w, _, _ := smallWindow(f)
	data, _ := w.MarshalBinary()
	f.Add(data)
	small := build(f, []post{{5, engine.Counts{Likes: 1}}, {9, engine.Counts{Views: 300}}}, Options{})
	sd, _ := small.MarshalBinary()
	f.Add(sd)
	f.Add(sd[:len(sd)-1])
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		checkConsistent(t, w)
	})
}

// checkConsistent checks that Get, GetMany and All agree on w.
func checkConsistent(t *testing.T, w *Window) {
	n := 0
	var ids []uint64
	var want []engine.Counts
	for id, c := range w.All() {
		if c.IsZero() || c.Likes < 0 || c.Views < 0 || c.Comments < 0 || c.Reposts < 0 || c.Favorites < 0 {
			t.Fatalf("post %d has counts %+v", id, c)
		}
		if got := w.Get(id); got != c {
			t.Fatalf("Get(%d) = %+v, All says %+v", id, got, c)
		}
		ids = append(ids, id, id^0x10)
		want = append(want, c, w.Get(id^0x10))
		n++
	}
	if n != w.Len() {
		t.Fatalf("All yielded %d posts, Len = %d", n, w.Len())
	}
	out := make([]engine.Counts, len(ids))
	w.GetMany(ids, out)
	for i := range ids {
		if out[i] != want[i] {
			t.Fatalf("GetMany(%d) = %+v, want %+v", ids[i], out[i], want[i])
		}
	}
}

// FuzzBlock fuzzes the block decoder below the checksum: the fuzzer's
// bytes get a valid CRC, so the structural checks are what stands between
// them and a lookup.
func FuzzBlock(f *testing.F) {
	w, _, _ := smallWindow(f)
	for b := range w.Index().Blocks() {
		first, off, end := w.Index().Block(b)
		f.Add(first, w.Bytes()[off:end-4], uint64(0))
	}
	f.Add(uint64(1), []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint64(1))
	f.Fuzz(func(t *testing.T, first uint64, body []byte, probe uint64) {
		b := make([]byte, len(body)+4, len(body)+BlockSlack)
		copy(b, body)
		le.PutUint32(b[len(body):], BlockCRC(first, body))
		ids := make([]uint64, MaxBlockPosts)
		counts := make([]engine.Counts, MaxBlockPosts)
		// Lookups on a merely parsed block must stay in bounds.
		if k, err := ParseBlock(first, b[:len(body)]); err == nil {
			k.Find(probe)
			k.Find(first)
			for i := range k.Len() {
				k.Counts(i)
			}
		}
		if err := VerifyBlock(first, b, ids, counts); err != nil {
			return
		}
		k, err := ParseBlock(first, b[:len(body)])
		if err != nil {
			t.Fatalf("VerifyBlock accepted what ParseBlock refuses: %v", err)
		}
		for i := range k.Len() {
			p, ok := k.Find(ids[i])
			if !ok || p != i {
				t.Fatalf("Find(%d) = %d, %v; want %d", ids[i], p, ok, i)
			}
			if got := k.Counts(i); got != counts[i] {
				t.Fatalf("Counts(%d) = %+v, Decode says %+v", i, got, counts[i])
			}
		}
		if p, ok := k.Find(probe); ok && ids[p] != probe {
			t.Fatalf("Find(%d) = %d, which holds %d", probe, p, ids[p])
		}
	})
}

// FuzzRoundTrip builds windows from fuzzed posts.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, uint8(3))
	f.Add(bytes.Repeat([]byte{0xff, 0, 7}, 200), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, per uint8) {
		// Each post: an id step (2 bytes, scaled), a field mask and values.
		var ps []post
		var id uint64
		for len(raw) >= 4 {
			step := uint64(raw[0])<<uint(raw[1]&63) + 1
			if id+step < id {
				break
			}
			id += step
			var c engine.Counts
			m := raw[2]
			v := min(uint64(raw[3])<<(uint(m>>5)*9), math.MaxInt64-numFields)
			for fi := range numFields {
				if m&(1<<fi) != 0 {
					setField(&c, fi, v+uint64(fi))
				}
			}
			ps = append(ps, post{id, c})
			raw = raw[4:]
		}
		var nz []post
		var all []uint64
		for _, p := range ps {
			all = append(all, p.id)
			if !p.c.IsZero() {
				nz = append(nz, p)
			}
		}
		w := build(t, ps, Options{BlockPosts: int(per)})
		checkWindowN(t, w, all, nz, 5)
		data, _ := w.MarshalBinary()
		if _, err := Unmarshal(data); err != nil {
			t.Fatalf("Unmarshal of a built window: %v", err)
		}
	})
}

func TestBlockCRC(t *testing.T) {
	for _, first := range []uint64{0, 1, 0x0123456789abcdef, math.MaxUint64} {
		body := []byte("some block bytes")
		var k [8]byte
		le.PutUint64(k[:], first)
		if got, want := BlockCRC(first, body), crc32.Checksum(append(k[:], body...), castagnoli); got != want {
			t.Fatalf("BlockCRC(%x) = %08x, want %08x", first, got, want)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	w, all, _ := smallWindow(t)
	ids := all[:50]
	out := make([]engine.Counts, 50)
	if n := testing.AllocsPerRun(100, func() { w.GetMany(ids, out) }); n != 0 {
		t.Errorf("GetMany: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { out[0] = w.Get(ids[7]) }); n != 0 {
		t.Errorf("Get: %v allocations", n)
	}
}

func TestConcurrentReads(t *testing.T) {
	w, all, ps := smallWindow(t)
	want := map[uint64]engine.Counts{}
	for _, p := range ps {
		want[p.id] = p.c
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			ids := make([]uint64, 50)
			out := make([]engine.Counts, 50)
			for range 500 {
				for j := range ids {
					ids[j] = all[rng.IntN(len(all))]
				}
				w.GetMany(ids, out)
				for j, id := range ids {
					if out[j] != want[id] {
						t.Errorf("%d = %+v, want %+v", id, out[j], want[id])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
