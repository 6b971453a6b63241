package embedded

import (
	"bytes"
	"io"
	"testing"

	"github.com/tally-dev/tally/engine/snapshot"
)

// decodeSnapshot runs the whole snapshot decoder over data.
func decodeSnapshot(data []byte) (*image, error) {
	r, err := snapshot.NewReader(bytes.NewReader(data), int64(len(data)), "fuzz")
	if err != nil {
		return nil, err
	}
	return readImage(r, true, tables{})
}

// reencode writes im as a snapshot and decodes it again.
func reencode(t *testing.T, im *image) *image {
	var buf bytes.Buffer
	w, _ := snapshot.NewWriter(&buf, im.index)
	if err := writeImage(w, im, func() error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	back, err := decodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatalf("a decoded state does not survive re-encoding: %v", err)
	}
	return back
}

// FuzzSnapshot feeds arbitrary files to the snapshot decoder: it must
// never panic, and whatever it accepts must be a state that writes and
// reads back as itself. The checksums make random input fail early; the
// seeds include valid snapshots with single bytes changed.
func FuzzSnapshot(f *testing.F) {
	good := validSnapshot(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	for _, i := range []int{0, 10, 30, len(good) / 3, len(good) - 5} {
		bad := bytes.Clone(good)
		bad[i] ^= 1
		f.Add(bad)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		im, err := decodeSnapshot(data)
		if err != nil {
			return
		}
		if back := reencode(t, im); back.st.dump() != im.st.dump() {
			t.Fatal("accepted state does not round-trip")
		}
	})
}

// FuzzSnapshotSection replaces one section of a valid snapshot with
// fuzzed items, framed and checksummed properly, so that the fuzzer
// exercises the section decoders rather than the checksums. in[0] picks
// the section, in[1] claims the item count, the rest is the payload.
// Decoding must not panic, and an accepted state must round-trip.
func FuzzSnapshotSection(f *testing.F) {
	good := validSnapshot(f)
	r, err := snapshot.NewReader(bytes.NewReader(good), int64(len(good)), "seed")
	if err != nil {
		f.Fatal(err)
	}
	// Seed with every section's real content, and a few edits of it.
	for i, s := range r.Sections() {
		sr, _ := r.Section(s.Tag)
		var payload []byte
		for {
			p, err := sr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Fatal(err)
			}
			payload = append(payload, p...)
		}
		if len(payload) > 4096 || s.Items > 255 {
			continue
		}
		f.Add(append([]byte{byte(i), byte(s.Items)}, payload...))
		if len(payload) > 3 {
			cut := append([]byte{byte(i), byte(s.Items)}, payload[:len(payload)-2]...)
			f.Add(cut)
			flip := append([]byte{byte(i), byte(s.Items)}, payload...)
			flip[2+len(payload)/2] ^= 0x80
			f.Add(flip)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 3 {
			return
		}
		secs := r.Sections() // every section the engine writes, the tables' images included
		target := secs[int(in[0])%len(secs)].Tag
		items, payload := uint64(in[1]), in[2:]
		var buf bytes.Buffer
		w, _ := snapshot.NewWriter(&buf, r.Index())
		for _, s := range r.Sections() {
			sr, _ := r.Section(s.Tag)
			w.Begin(s.Tag)
			if s.Tag == target {
				if items == 0 || items > uint64(len(payload)) {
					return
				}
				w.Chunk(payload, items)
			} else {
				// One chunk per section in the seed, so its item count
				// is the section's.
				for {
					p, err := sr.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					w.Chunk(p, s.Items)
				}
			}
			w.End()
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		im, err := decodeSnapshot(buf.Bytes())
		if err != nil {
			return
		}
		if back := reencode(t, im); back.st.dump() != im.st.dump() {
			t.Fatal("accepted state does not round-trip")
		}
	})
}
