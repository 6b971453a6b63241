package receipts

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

func collect(f func(int, func(uint32)), limit int) []uint32 {
	var out []uint32
	f(limit, func(m uint32) { out = append(out, m) })
	return out
}

// model is the obvious receipt: sets of mapids.
type model struct {
	maxID          uint32
	read, excluded map[uint32]bool
}

func newModel(maxID, sender uint32, quit []uint32) *model {
	m := &model{maxID: maxID, read: map[uint32]bool{}, excluded: map[uint32]bool{}}
	for _, q := range append(quit, sender) {
		if q >= 1 && q <= maxID {
			m.excluded[q] = true
		}
	}
	return m
}

func (m *model) counted(id uint32) bool { return id >= 1 && id <= m.maxID && !m.excluded[id] }

// same checks every observable of r against m; mapids are probed over the
// whole range for small groups and at the interesting points for big ones.
func same(t *testing.T, r *Receipt, m *model) {
	t.Helper()
	if r.MaxID() != m.maxID {
		t.Fatalf("MaxID = %d, want %d", r.MaxID(), m.maxID)
	}
	var readers, unreaders []uint32
	probe := func(id uint32) {
		if r.Counted(id) != m.counted(id) || r.IsRead(id) != m.read[id] {
			t.Fatalf("mapid %d: Counted=%v IsRead=%v, want %v %v", id, r.Counted(id), r.IsRead(id), m.counted(id), m.read[id])
		}
	}
	if m.maxID <= 5000 {
		for id := uint32(0); id <= m.maxID+9; id++ {
			probe(id)
			if m.read[id] {
				readers = append(readers, id)
			} else if m.counted(id) {
				unreaders = append(unreaders, id)
			}
		}
	} else {
		for id := range m.read {
			probe(id)
			readers = append(readers, id)
		}
		for id := range m.excluded {
			probe(id)
		}
		probe(0)
		probe(m.maxID)
		probe(m.maxID + 1)
		slices.Sort(readers)
		for id := uint32(1); id <= m.maxID && len(unreaders) < 300; id++ {
			if m.counted(id) && !m.read[id] {
				unreaders = append(unreaders, id)
			}
		}
	}
	read, unread := r.Counts()
	wantUnread := int(m.maxID) - len(m.excluded) - len(m.read)
	if read != len(m.read) || unread != wantUnread {
		t.Fatalf("Counts = %d, %d; want %d, %d", read, unread, len(m.read), wantUnread)
	}
	for _, limit := range []int{0, 1, 7, 300} {
		if got, want := collect(r.Readers, limit), readers[:min(limit, len(readers))]; !slices.Equal(got, want) {
			t.Fatalf("Readers(%d) = %v, want %v", limit, got, want)
		}
		if got, want := collect(r.Unreaders, limit), unreaders[:min(limit, len(unreaders))]; !slices.Equal(got, want) {
			t.Fatalf("Unreaders(%d) = %v, want %v", limit, got, want)
		}
	}
	samePages(t, r, m)
	// The encoding round-trips to the same state and the same bytes.
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != r.SizeBytes() {
		t.Fatalf("SizeBytes = %d, encoding is %d bytes", r.SizeBytes(), len(b))
	}
	var back Receipt
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary of own encoding: %v", err)
	}
	if b2, _ := back.MarshalBinary(); !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
	if r2, u2 := back.Counts(); r2 != read || u2 != unread {
		t.Fatal("decoded Counts differ")
	}
}

// TestGroup200 walks the API.md example: a 200-member group where members
// 3 and 50 had quit before the message, the sender is 7, and members 201
// and 202 join afterwards.
func TestGroup200(t *testing.T) {
	quit := []uint32{3, 50}
	r := New(200, 7, slices.Values(quit))
	m := newModel(200, 7, quit)
	if r.sp != nil {
		t.Fatal("200-member group is not plain")
	}
	same(t, &r, m)
	if read, unread := r.Counts(); read != 0 || unread != 197 {
		t.Fatalf("Counts = %d, %d; want 0, 197", read, unread)
	}
	for _, id := range []uint32{0, 3, 50, 7, 201, 202, 1000} {
		if r.MarkRead(id) {
			t.Fatalf("MarkRead(%d) counted an uncounted member", id)
		}
	}
	for _, id := range []uint32{1, 2, 8, 199, 200, 64, 65} {
		if !r.MarkRead(id) {
			t.Fatalf("MarkRead(%d) = false", id)
		}
		m.read[id] = true
		if r.MarkRead(id) {
			t.Fatalf("second MarkRead(%d) = true", id)
		}
	}
	same(t, &r, m)
	if got := collect(r.Readers, 3); !slices.Equal(got, []uint32{1, 2, 8}) {
		t.Fatalf("Readers(3) = %v", got)
	}
	if got := collect(r.Unreaders, 4); !slices.Equal(got, []uint32{4, 5, 6, 9}) {
		t.Fatalf("Unreaders(4) = %v", got)
	}
	// 1 version + 1 form + 2 maxid + 2×25 bitmap bytes.
	if r.SizeBytes() != 54 {
		t.Fatalf("200-member receipt is %d bytes, want 54", r.SizeBytes())
	}
	for id := uint32(1); id <= 200; id++ {
		if r.MarkRead(id) {
			m.read[id] = true
		}
	}
	same(t, &r, m)
	if read, unread := r.Counts(); read != 197 || unread != 0 {
		t.Fatalf("all read: Counts = %d, %d", read, unread)
	}
}

func TestBigGroupSparse(t *testing.T) {
	quit := []uint32{5, 99_999, 42_000}
	r := New(100_000, 1, slices.Values(quit))
	m := newModel(100_000, 1, quit)
	if r.sp == nil {
		t.Fatal("100,000-member group with few reads is not sparse")
	}
	for _, id := range []uint32{2, 77_777, 100_000, 65_536, 65_537} {
		r.MarkRead(id)
		m.read[id] = true
	}
	same(t, &r, m)
	plain := 2 + 3 + 2*12_500
	if r.SizeBytes() > 100 {
		t.Fatalf("sparse 100,000-member receipt is %d bytes (plain would be %d)", r.SizeBytes(), plain)
	}
	t.Logf("100,000 members, 5 readers: %d bytes (plain %d)", r.SizeBytes(), plain)

	// Even when most members read, Roaring's bitmap containers (one bit per
	// mapid, like plain) and a sparse excluded set keep it the smaller form.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 80_000 {
		id := 1 + rng.Uint32N(100_000)
		if r.MarkRead(id) {
			m.read[id] = true
		}
	}
	if r.sp == nil || r.SizeBytes() > plain {
		t.Fatalf("%d readers: sparse=%v, %d bytes, plain %d", len(m.read), r.sp != nil, r.SizeBytes(), plain)
	}
	same(t, &r, m)
}

// TestConvertToPlain: in a mid-size group the Roaring form starts smaller
// and grows two bytes per reader; once plain bitmaps (plus the in-memory
// overhead allowance) are smaller, the receipt converts and stays plain.
func TestConvertToPlain(t *testing.T) {
	r := New(4000, 1, nil)
	m := newModel(4000, 1, nil)
	if r.sp == nil {
		t.Fatal("4000-member group with no reads is not sparse")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for r.sp != nil {
		id := 1 + rng.Uint32N(4000)
		if r.MarkRead(id) {
			m.read[id] = true
		}
	}
	// 2×500 plain bytes; Roaring is ~26 bytes + 2 per reader + 256.
	if n := len(m.read); n < 330 || n > 380 {
		t.Fatalf("converted after %d readers", n)
	}
	if r.SizeBytes() != 2+2+1000 {
		t.Fatalf("plain size %d", r.SizeBytes())
	}
	same(t, &r, m)
	for range 3000 {
		id := 1 + rng.Uint32N(4000)
		if r.MarkRead(id) {
			m.read[id] = true
		}
	}
	if r.sp != nil {
		t.Fatal("went back to sparse")
	}
	same(t, &r, m)
}

// TestSparseManyExcluded covers the Roaring form where the excluded set is
// large and bitmap containers appear.
func TestSparseManyExcluded(t *testing.T) {
	var quit []uint32
	for id := uint32(70_000); id < 80_000; id++ {
		quit = append(quit, id)
	}
	r := New(1_000_000, 999_999, slices.Values(quit))
	if r.sp == nil {
		t.Fatal("not sparse")
	}
	m := newModel(1_000_000, 999_999, quit)
	for _, id := range []uint32{69_999, 80_000, 1, 1_000_000, 75_000} {
		if r.MarkRead(id) {
			m.read[id] = true
		}
	}
	same(t, &r, m)
	// Unreaders starting inside a long excluded stretch.
	r2 := New(100_000, 1, func(yield func(uint32) bool) {
		for id := uint32(2); id <= 9_000; id++ {
			if !yield(id) {
				return
			}
		}
	})
	if got := collect(r2.Unreaders, 2); !slices.Equal(got, []uint32{9_001, 9_002}) {
		t.Fatalf("Unreaders = %v", got)
	}
}

func TestEdges(t *testing.T) {
	var z Receipt
	if z.MarkRead(1) || z.Counted(0) || z.IsRead(1) {
		t.Fatal("zero receipt counts somebody")
	}
	same(t, &z, newModel(0, 0, nil))
	for _, maxID := range []uint32{1, 7, 8, 9, 63, 64, 65, 1023, 1024, 1025, 2048, 3000} {
		quit := []uint32{0, maxID, maxID + 1, 1, 1}
		r := New(maxID, 2, slices.Values(quit))
		m := newModel(maxID, 2, quit)
		for id := uint32(0); id <= maxID+1; id += 3 {
			if r.MarkRead(id) {
				m.read[id] = true
			}
		}
		same(t, &r, m)
	}
	// A quit iterator that is stopped early is fine, and nil means none.
	r := New(10, 1, nil)
	if _, unread := r.Counts(); unread != 9 {
		t.Fatalf("unread = %d", unread)
	}
}

// TestRandom compares random receipts and reads with the model across
// the sizes where the representation changes.
func TestRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 60 {
		maxID := 1 + rng.Uint32N(20_000)
		var quit []uint32
		for range rng.IntN(50) {
			quit = append(quit, rng.Uint32N(maxID+2))
		}
		sender := 1 + rng.Uint32N(maxID)
		r := New(maxID, sender, slices.Values(quit))
		m := newModel(maxID, sender, quit)
		reads := rng.IntN(int(maxID) + 1)
		for range reads {
			id := rng.Uint32N(maxID + 2)
			want := m.counted(id) && !m.read[id]
			if got := r.MarkRead(id); got != want {
				t.Fatalf("MarkRead(%d) = %v, want %v", id, got, want)
			}
			if want {
				m.read[id] = true
			}
		}
		same(t, &r, m)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	good := New(20, 3, slices.Values([]uint32{4}))
	good.MarkRead(5)
	b, _ := good.MarshalBinary()
	bad := map[string][]byte{
		"empty":       nil,
		"short":       b[:2],
		"version":     append([]byte{9}, b[1:]...),
		"form":        append([]byte{b[0], 7}, b[2:]...),
		"truncated":   b[:len(b)-1],
		"trailing":    append(slices.Clone(b), 0),
		"read+quit":   func() []byte { c := slices.Clone(b); c[3] |= 1 << 3; return c }(), // mapid 4 read and quit
		"beyondmaxid": func() []byte { c := slices.Clone(b); c[5] |= 1 << 7; return c }(), // mapid 24 > 20
	}
	big := New(100_000, 1, nil)
	big.MarkRead(10)
	bb, _ := big.MarshalBinary()
	bad["roaring truncated"] = bb[:len(bb)-1]
	bad["roaring trailing"] = append(slices.Clone(bb), 0)
	bad["roaring length"] = func() []byte { c := slices.Clone(bb); c[5] = 0x7f; return c }()
	for name, data := range bad {
		r := good
		if err := r.UnmarshalBinary(data); err == nil {
			t.Errorf("%s: accepted %x", name, data)
		}
		if read, _ := r.Counts(); read != 1 {
			t.Errorf("%s: failed decode changed the receipt", name)
		}
	}
	// A reader mapid above maxid in the Roaring form.
	over := New(100_000, 1, nil)
	over.sp.read.Add(100_001)
	ob, _ := over.MarshalBinary()
	var r Receipt
	if err := r.UnmarshalBinary(ob); err == nil {
		t.Error("accepted a reader beyond maxid")
	}
}

func FuzzUnmarshal(f *testing.F) {
	add := func(r Receipt) {
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	add(Receipt{})
	add(New(200, 7, slices.Values([]uint32{3, 50})))
	r := New(100_000, 1, slices.Values([]uint32{7, 8, 70_000}))
	r.MarkRead(2)
	r.MarkRead(99_000)
	add(r)
	f.Add([]byte{1, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0})
	f.Add([]byte{1, 0, 9, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Receipt
		if err := r.UnmarshalBinary(data); err != nil {
			return
		}
		read, unread := r.Counts()
		if read < 0 || unread < 0 {
			t.Fatalf("negative counts %d %d", read, unread)
		}
		n := 0
		r.Readers(1<<30, func(uint32) { n++ })
		if n != read {
			t.Fatalf("Readers yielded %d, Counts says %d", n, read)
		}
		n = 0
		r.Unreaders(10, func(m uint32) {
			if !r.Counted(m) || r.IsRead(m) {
				t.Fatalf("Unreaders yielded %d", m)
			}
			n++
		})
		if n != min(10, unread) {
			t.Fatalf("Unreaders(10) yielded %d of %d", n, unread)
		}
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Receipt
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatalf("own encoding rejected: %v", err)
		}
		if b2, _ := back.MarshalBinary(); !bytes.Equal(b, b2) {
			t.Fatal("encoding not stable")
		}
		if r2, u2 := back.Counts(); r2 != read || u2 != unread {
			t.Fatal("round trip changed counts")
		}
		// A decoded receipt accepts reads like any other.
		for id := uint32(0); id < 70; id++ {
			was := r.IsRead(id)
			if r.MarkRead(id) == (was || !r.Counted(id)) {
				t.Fatalf("MarkRead(%d) inconsistent", id)
			}
		}
	})
}

// BenchmarkMarkRead measures a read receipt update in a 200-member group.
func BenchmarkMarkRead(b *testing.B) {
	r := New(200, 1, nil)
	var id uint32
	for b.Loop() {
		id = id%200 + 1
		r.MarkRead(id)
	}
}

// samePages checks ReadersAfter and UnreadersAfter against the model at
// cursors around the interesting points (window and word edges, the
// readers themselves), and that paging through a small group's lists in
// pages of 7 yields each list whole.
func samePages(t *testing.T, r *Receipt, m *model) {
	t.Helper()
	want := func(after uint32, limit int, reader bool) []uint32 {
		var out []uint32
		for id := uint64(after) + 1; id <= uint64(m.maxID) && len(out) < limit; id++ {
			if m.read[uint32(id)] == reader && m.counted(uint32(id)) {
				out = append(out, uint32(id))
			}
		}
		return out
	}
	afters := []uint32{0, 1, 63, 64, 65, 4095, 4096, 4097, m.maxID - 1, m.maxID, m.maxID + 5}
	for id := range m.read {
		if len(afters) > 40 {
			break
		}
		afters = append(afters, id, id-1)
	}
	for _, after := range afters {
		for _, limit := range []int{1, 5, 100} {
			var got []uint32
			r.ReadersAfter(after, limit, func(x uint32) { got = append(got, x) })
			if w := want(after, limit, true); !slices.Equal(got, w) {
				t.Fatalf("ReadersAfter(%d, %d) = %v, want %v", after, limit, got, w)
			}
			got = nil
			r.UnreadersAfter(after, limit, func(x uint32) { got = append(got, x) })
			if w := want(after, limit, false); !slices.Equal(got, w) {
				t.Fatalf("UnreadersAfter(%d, %d) = %v, want %v", after, limit, got, w)
			}
		}
	}
	if m.maxID > 5000 {
		return
	}
	for _, reader := range []bool{true, false} {
		var all []uint32
		after := uint32(0)
		for {
			var page []uint32
			if reader {
				r.ReadersAfter(after, 7, func(x uint32) { page = append(page, x) })
			} else {
				r.UnreadersAfter(after, 7, func(x uint32) { page = append(page, x) })
			}
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			after = page[len(page)-1]
		}
		if w := want(0, int(m.maxID)+1, reader); !slices.Equal(all, w) {
			t.Fatalf("paging (readers=%v) gave %d mapids, want %d", reader, len(all), len(w))
		}
	}
}

// TestClone: a clone answers as its original and changes independently
// of it, in both forms.
func TestClone(t *testing.T) {
	for _, members := range []uint32{200, 100_000} {
		r := New(members, 1, nil)
		r.MarkRead(2)
		m := newModel(members, 1, nil)
		m.read[2] = true
		c := r.Clone()
		same(t, &c, m)
		c.MarkRead(3)
		r.MarkRead(4)
		if r.IsRead(3) || c.IsRead(4) {
			t.Fatalf("%d members: a clone shares bits with its original", members)
		}
		m.read[4] = true
		same(t, &r, m)
	}
}
