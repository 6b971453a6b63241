package registry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// seedRegistry builds a small registry with every kind of window: open,
// sealed, sealed with overrides, cold with overrides (when dir is set),
// one with a job planned (frozen entries) and the epoch window; with
// node bits spread so blocks have varying widths.
func seedRegistry(t testing.TB, dir string, posts int) (*Registry, map[uint64]uint64) {
	opts := Options{CompactMin: 1 << 30}
	if dir != "" {
		opts.Dir, opts.ColdAge = dir, 20*day
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	model := map[uint64]uint64{}
	rng := rand.New(rand.NewPCG(11, uint64(posts)))
	put := func(id, a uint64) {
		if _, err := r.Put(id, a); err != nil {
			t.Fatal(err)
		}
		model[id] = a
	}
	for range posts {
		age := time.Duration(rng.Int64N(int64(40 * day)))
		put(idAt(now.Add(-age), rng.Uint64N(1024), rng.Uint64N(16)), rng.Uint64N(1<<uint(rng.IntN(40)+1)))
	}
	put(5, 0)
	if err := r.Maintain(now); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for id := range model {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for range posts / 10 {
		put(ids[rng.IntN(len(ids))], rng.Uint64N(1000)) // overrides
		age := time.Duration(rng.Int64N(int64(40 * day)))
		put(idAt(now.Add(-age), rng.Uint64N(1024), 0), rng.Uint64N(1000)) // late posts
	}
	// A job planned and left out: its window's entries are frozen.
	r.opts.CompactMin = 1
	if j := r.Plan(now); (j == nil || j.frozen == nil) && posts >= 100 {
		t.Fatal("no job with frozen entries")
	}
	r.opts.CompactMin = 1 << 30
	put(idAt(now.Add(-39*day), 3, 3), 77)
	return r, model
}

func image(t testing.TB, r *Registry) []byte {
	var b bytes.Buffer
	n, err := r.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, b.Len())
	}
	return b.Bytes()
}

// TestPersistRoundTrip: images of registries in every state load back to
// the same posts, read exactly their own bytes, and write back the same
// bytes.
func TestPersistRoundTrip(t *testing.T) {
	empty, _ := New(Options{})
	cases := map[string]func(t *testing.T) (*Registry, map[uint64]uint64){
		"empty": func(t *testing.T) (*Registry, map[uint64]uint64) { return empty, map[uint64]uint64{} },
		"memory": func(t *testing.T) (*Registry, map[uint64]uint64) {
			return seedRegistry(t, "", 3000)
		},
		"cold": func(t *testing.T) (*Registry, map[uint64]uint64) {
			return seedRegistry(t, t.TempDir(), 3000)
		},
		"allOpen": func(t *testing.T) (*Registry, map[uint64]uint64) {
			r, _ := New(Options{OpenAge: 1000 * day})
			m := map[uint64]uint64{}
			for i := range 500 {
				id := idAt(now.Add(-time.Duration(i)*time.Hour), uint64(i), 0)
				r.Put(id, uint64(i))
				m[id] = uint64(i)
			}
			return r, m
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			r, model := mk(t)
			defer r.Close()
			st := r.Stats()
			t.Logf("%+v", st)
			img := image(t, r)
			t.Logf("image: %d bytes, %.2f B/post", len(img), float64(len(img))/float64(max(1, r.Len())))
			probes := slices.Collect(func(yield func(uint64) bool) {
				for id := range model {
					yield(id)
					yield(id + 1)
				}
			})
			// Trailing bytes stay unread: the image delimits itself.
			stream := bytes.NewReader(append(slices.Clone(img), "tail"...))
			l, _ := New(Options{})
			if err := l.Load(stream, now); err != nil {
				t.Fatal(err)
			}
			if stream.Len() != 4 {
				t.Fatalf("Load left %d bytes of 4", stream.Len())
			}
			check(t, l, model, probes)
			if again := image(t, l); !bytes.Equal(again, img) {
				t.Fatal("a loaded registry writes a different image")
			}
			// Another window size: re-partitioned.
			for _, wm := range []int64{3_600_000, 7 * 86_400_000} {
				l2, _ := New(Options{WindowMillis: wm})
				if err := l2.Load(bytes.NewReader(img), now); err != nil {
					t.Fatal(err)
				}
				check(t, l2, model, probes)
				if err := l2.Load(bytes.NewReader(img), now); err == nil && r.Len() > 0 {
					t.Fatal("a resized load into a non-empty registry succeeded")
				}
			}
			// A load replaces the contents; the planned job is void.
			if r.Len() > 0 {
				j := r.Plan(now)
				if err := r.Load(bytes.NewReader(img), now); err != nil {
					t.Fatal(err)
				}
				if j != nil {
					j.Run()
					j.Finish()
				}
				check(t, r, model, probes)
			}
		})
	}
}

// TestPersistCorrupt: every byte of a small image flipped, and every
// truncation, fails with ErrCorrupt and leaves the registry as it was, or
// (a flip no check can see, e.g. in an author) loads a registry that
// answers consistently.
func TestPersistCorrupt(t *testing.T) {
	src, _ := seedRegistry(t, t.TempDir(), 400)
	defer src.Close()
	img := image(t, src)
	t.Logf("image of %d bytes", len(img))
	dst, _ := New(Options{})
	dst.Put(idAt(now, 1, 1), 42)
	before := image(t, dst)
	unchanged := func() {
		if !bytes.Equal(image(t, dst), before) {
			t.Fatal("a failed Load changed the registry")
		}
	}
	for n := range len(img) {
		err := dst.Load(bytes.NewReader(img[:n]), now)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
		unchanged()
	}
	loaded := 0
	for i := range img {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := slices.Clone(img)
			bad[i] ^= x
			err := dst.Load(bytes.NewReader(bad), now)
			if err == nil {
				loaded++
				consistent(t, dst)
				dst.Load(bytes.NewReader(before), now)
				continue
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d ^ %#x: %v", i, x, err)
			}
			unchanged()
		}
	}
	if loaded > 0 {
		t.Fatalf("%d flips loaded", loaded) // the CRCs catch every single flip
	}
}

// consistent checks that a loaded registry answers as its Range says:
// Range gives increasing ids, Len of them, each found by Get and GetMany
// with the same author, their neighbours not found unless listed; and
// that it writes an image that loads back the same.
func consistent(t testing.TB, r *Registry) {
	t.Helper()
	var rows []Row
	if err := r.Range(func(id, a uint64) bool { rows = append(rows, Row{id, a}); return true }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != r.Len() {
		t.Fatalf("Range gave %d posts, Len %d", len(rows), r.Len())
	}
	in := map[uint64]uint64{}
	for i, p := range rows {
		if i > 0 && p.ID <= rows[i-1].ID {
			t.Fatalf("Range gave %d after %d", p.ID, rows[i-1].ID)
		}
		in[p.ID] = p.Author
	}
	var probes []uint64
	for _, p := range rows {
		probes = append(probes, p.ID, p.ID+1, p.ID-1)
	}
	authors := make([]uint64, len(probes))
	found := make([]bool, len(probes))
	if err := r.GetMany(probes, authors, found); err != nil {
		t.Fatal(err)
	}
	for i, id := range probes {
		a, ok, err := r.Get(id)
		ma, mok := in[id]
		if err != nil || a != ma || ok != mok || authors[i] != ma || found[i] != mok {
			t.Fatalf("post %d: Get %d,%v,%v GetMany %d,%v; Range %d,%v", id, a, ok, err, authors[i], found[i], ma, mok)
		}
	}
	l, _ := New(Options{})
	if err := l.Load(bytes.NewReader(image(t, r)), now); err != nil {
		t.Fatal(err)
	}
	if l.Len() != r.Len() {
		t.Fatal("image round trip changed Len")
	}
}

// fixCRCs rewrites the checksums of an image's header and windows (as far
// as its lengths parse), so that fuzzing reaches the parser behind them:
// what a bug writing garbage under valid checksums would produce.
func fixCRCs(b []byte) []byte {
	b = slices.Clone(b)
	if len(b) < headerBytes {
		return b
	}
	binary.LittleEndian.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
	p := headerBytes
	for p+8 <= len(b) {
		n := binary.LittleEndian.Uint64(b[p:])
		if n > uint64(len(b)-p-8) || uint64(len(b)-p-8)-n < 4 {
			break
		}
		body := b[p+8 : p+8+int(n)]
		binary.LittleEndian.PutUint32(b[p+8+int(n):], crc32.Checksum(body, castagnoli))
		p += 8 + int(n) + 4
	}
	return b
}

// FuzzLoad loads arbitrary bytes, as they are and with their checksums
// fixed: Load must fail cleanly (ErrCorrupt, registry unchanged) or give
// a registry that answers consistently; it must never panic.
func FuzzLoad(f *testing.F) {
	for _, n := range []int{0, 3, 40, 300} {
		r, _ := seedRegistry(f, f.TempDir(), n+1)
		f.Add(image(f, r))
		r.Close()
	}
	hr, _ := New(Options{WindowMillis: 3_600_000})
	hr.Put(idAt(now, 1, 1), 9)
	hr.Put(idAt(now.Add(-30*day), 1, 1), 9)
	hr.Maintain(now)
	f.Add(image(f, hr))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range [][]byte{data, fixCRCs(data)} {
			// Into an empty registry: every window size loads.
			r, _ := New(Options{})
			if err := r.Load(bytes.NewReader(b), now); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error not ErrCorrupt: %v", err)
				}
				if r.Len() != 0 || len(r.wins) != 0 {
					t.Fatal("a failed Load changed the registry")
				}
			} else {
				consistent(t, r)
			}
			// Into a non-empty one: an error (a resized image is refused
			// there) leaves it as it was.
			r, _ = New(Options{})
			r.Put(idAt(now, 2, 2), 1)
			if err := r.Load(bytes.NewReader(b), now); err != nil {
				if a, ok, _ := r.Get(idAt(now, 2, 2)); !ok || a != 1 || r.Len() != 1 {
					t.Fatal("a failed Load changed the registry")
				}
			} else {
				consistent(t, r)
			}
		}
	})
}

var _ io.WriterTo = (*Registry)(nil)
