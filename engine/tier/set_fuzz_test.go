package tier

import (
	"bytes"
	"github.com/tally-dev/tally/engine/snowflake"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine/counters"
)

// seedSetImages returns snapshot images of small sets: open, sealed and
// cold-free windows with deltas of additions and tombstones.
func seedSetImages(t testing.TB) [][]byte {
	var out [][]byte
	for _, n := range []int{0, 3, 400} {
		opts := setOpts("")
		opts.OpenAge = 2 * time.Second
		s, err := NewSet("LIKE", opts)
		if err != nil {
			t.Fatal(err)
		}
		s.blockLimit = 16
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		hot := []uint64{randID(rng, 5)}
		for range n {
			s.React(randUser(rng), randLikedPost(rng, hot, 5), randKind(rng, 6))
		}
		s.Maintain(testEpoch.Add(4 * time.Second))
		for range n / 10 {
			s.Add(randUser(rng), randLikedPost(rng, hot, 5))
			s.React(randUser(rng), randLikedPost(rng, hot, 5), randKind(rng, 6))
			s.Remove(randUser(rng), randLikedPost(rng, hot, 5))
		}
		var pairs []upair // some kinds switched in the deltas
		s.Range(func(u, p uint64) bool { pairs = append(pairs, upair{u, p}); return len(pairs) < n/10 })
		for _, q := range pairs {
			s.React(q.u, q.p, randKind(rng, 6))
		}
		var buf bytes.Buffer
		if _, err := s.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

// FuzzSetLoad feeds arbitrary images to a set's Load: it never panics,
// and an image it accepts gives a set whose RangeKinds agrees with Len
// and KindOf, that writes an image loading again to the same pairs, and whose
// windows seal without error.
func FuzzSetLoad(f *testing.F) {
	for _, s := range seedSetImages(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		s, err := NewSet("LIKE", setOpts(""))
		if err != nil {
			t.Fatal(err)
		}
		if s.Load(bytes.NewReader(img)) != nil {
			if s.Len() != 0 {
				t.Fatal("a refused image changed the set")
			}
			return
		}
		n := 0
		if err := s.RangeKinds(func(u, p uint64, kind counters.Kind) bool {
			n++
			if got, err := s.KindOf(u, p); err != nil || got != kind {
				t.Fatalf("RangeKinds yields (%d, %d, %d), KindOf says %d %v", u, p, kind, got, err)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if n != s.Len() {
			t.Fatalf("Range yields %d pairs, Len %d", n, s.Len())
		}
		var buf bytes.Buffer
		if _, err := s.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		again, _ := NewSet("LIKE", setOpts(""))
		if err := again.Load(&buf); err != nil {
			t.Fatalf("an image Load accepted, rewritten, is refused: %v", err)
		}
		if again.Len() != s.Len() {
			t.Fatalf("Len %d then %d", s.Len(), again.Len())
		}
		if err := s.Maintain(testEpoch.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if s.Len() != n {
			t.Fatalf("Len %d after sealing, %d before", s.Len(), n)
		}
	})
}

// TestPairBlockCRC: the hand-rolled checksum is CRC32C of the first pair's
// 16 bytes and the block.
func TestPairBlockCRC(t *testing.T) {
	b := []byte("some block bytes")
	var want []byte
	want = le.AppendUint64(want, 0x0102030405060708)
	want = le.AppendUint64(want, 99)
	want = append(want, b...)
	if got := pairBlockCRC(0x0102030405060708, 99, b); got != crc32.Checksum(want, castagnoli) {
		t.Fatalf("pairBlockCRC %08x, CRC32C %08x", got, crc32.Checksum(want, castagnoli))
	}
}

// FuzzPairBlock feeds the pair block parser and decoder arbitrary bytes
// and first pairs: they must never panic or read out of bounds, and a
// block that decodes must answer kindOf exactly as its decoded pairs
// say. The corpus starts from the blocks of windows of random pairs,
// likes only and with a mix of kinds.
func FuzzPairBlock(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kinds := range []int{1, 6, counters.MaxKinds} {
		for seed, limit := range []int{3, 64, blockPairs, blockPairs} {
			var buf bytes.Buffer
			pw := newPairWriter(&buf, [4]byte{'L', 'I', 'K', 'E'}, limit)
			post := uint64(1 << 40)
			var ps []pair
			for range 2000 {
				post += rng.Uint64N(3) << rng.UintN(20)
				user := randUser(rng)
				if seed == 3 {
					// Comment ids as users: bits they all share (node,
					// sequence) are squeezed out.
					user = snowflake.Make(1_700_000_000_000+rng.Int64N(1e9), rng.Uint64N(4), 0)
				}
				ps = append(ps, pair{post, user, randKind(rng, kinds)})
			}
			slices.SortFunc(ps, comparePairs)
			for _, q := range slices.CompactFunc(ps, func(a, b pair) bool { return comparePairs(a, b) == 0 }) {
				if err := pw.add(q); err != nil {
					f.Fatal(err)
				}
			}
			pw.close()
			data := buf.Bytes()
			idx, err := parseImage(data, imageFormat{tag: [4]byte{'L', 'I', 'K', 'E'}, entrySize: pairEntrySize, perBlock: maxBlockPairs})
			if err != nil {
				f.Fatal(err)
			}
			for b := range min(idx.blocks, 4) {
				p, u := idx.firstPair(b)
				off, end := idx.span(b)
				f.Add(data[off:end-4], p, u)
			}
		}
	}
	sc := new(pairScratch)
	f.Fuzz(func(t *testing.T, data []byte, firstPost, firstUser uint64) {
		buf := make([]byte, len(data)+BlockSlack)
		copy(buf, data)
		var blk pairBlock
		if blk.parse(firstPost, firstUser, buf[:len(data)]) != nil {
			return
		}
		probe := func(post, user uint64) counters.Kind { return blk.kindOf(post, user) }
		for i := range 64 {
			probe(firstPost+uint64(i), firstUser+uint64(i))
			probe(firstPost, firstUser-uint64(i))
			probe(firstPost^1<<uint(i), firstUser)
		}
		n, err := blk.decode(sc.pairs[:], sc.vals[:])
		if err != nil {
			return
		}
		in := make(map[pair]counters.Kind, n)
		for j, q := range sc.pairs[:n] {
			if j > 0 && comparePairs(sc.pairs[j-1], q) >= 0 {
				t.Fatalf("decoded pairs out of order at %d", j)
			}
			if q.kind == counters.NoKind || q.kind > counters.MaxKinds {
				t.Fatalf("decoded kind %d", q.kind)
			}
			in[pair{post: q.post, user: q.user}] = q.kind
		}
		for _, q := range sc.pairs[:n] {
			if got := probe(q.post, q.user); got != q.kind {
				t.Fatalf("decoded %v, kindOf says %d", q, got)
			}
			for _, x := range []pair{{post: q.post, user: q.user + 1}, {post: q.post, user: q.user - 1}, {post: q.post + 1, user: q.user}, {post: q.post - 1, user: q.user}} {
				if got := probe(x.post, x.user); got != in[x] {
					t.Fatalf("kindOf(%v) = %d, decoded set says %d", x, got, in[x])
				}
			}
		}
	})
}
