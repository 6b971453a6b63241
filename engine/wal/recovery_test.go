package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildLog writes records 1..n (payloadFor) into dir and closes the log.
func buildLog(t *testing.T, dir string, n int, segmentBytes int64) {
	t.Helper()
	l := mustOpen(t, dir, Options{Sync: SyncNone, SegmentBytes: segmentBytes})
	appendN(t, l, 1, n)
	mustClose(t, l)
}

// reopenKeeps opens dir, expects records 1..want and no error, and checks
// the log accepts the next record at want+1 and keeps it across a reopen.
func reopenKeeps(t *testing.T, dir string, want int, logs *logBuf) {
	t.Helper()
	opts := Options{Sync: SyncNone}
	if logs != nil {
		opts.Logger = logs.logger()
	}
	l := mustOpen(t, dir, opts)
	checkRecords(t, replayAll(t, l, 1), 1, want)
	appendN(t, l, want+1, 1)
	mustClose(t, l)
	l = mustOpen(t, dir, Options{Sync: SyncNone})
	checkRecords(t, replayAll(t, l, 1), 1, want+1)
	mustClose(t, l)
}

func TestTornTailAtEveryOffset(t *testing.T) {
	src := t.TempDir()
	buildLog(t, src, 5, 0)
	seg := segmentPath(src, 1)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	offs := recordOffsets(t, seg)
	lastOff := offs[len(offs)-1]
	if int64(len(data))-lastOff < recordHeaderSize+50 {
		t.Fatalf("last record too small for a meaningful test: %d bytes", int64(len(data))-lastOff)
	}
	for cut := lastOff; cut < int64(len(data)); cut++ {
		dir := t.TempDir()
		path := segmentPath(dir, 1)
		if err := os.WriteFile(path, data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		copyFile(t, manifestPath(src), manifestPath(dir))
		var logs logBuf
		l := mustOpen(t, dir, Options{Sync: SyncNone, Logger: logs.logger()})
		if l.LastIndex() != 4 {
			t.Fatalf("cut at %d: LastIndex %d, want 4", cut, l.LastIndex())
		}
		mustClose(t, l)
		info, _ := os.Stat(path)
		if info.Size() != lastOff {
			t.Fatalf("cut at %d: file is %d bytes after Open, want %d", cut, info.Size(), lastOff)
		}
		warned := strings.Contains(logs.String(), "torn")
		if cut == lastOff && warned {
			t.Fatalf("cut at a record boundary warned: %s", logs.String())
		}
		if cut > lastOff {
			want := fmt.Sprintf("offset=%d", lastOff)
			if !warned || !strings.Contains(logs.String(), path) || !strings.Contains(logs.String(), want) {
				t.Fatalf("cut at %d: warning must name %s and %s, got %q", cut, path, want, logs.String())
			}
		}
		reopenKeeps(t, dir, 4, nil)
	}
}

func TestZeroFilledTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage turns the segment's bytes into what a crash left.
		damage func(data []byte, lastOff int64) []byte
		keep   int
	}{
		{"zeros after the last record", func(d []byte, _ int64) []byte {
			return append(d, make([]byte, 4096)...)
		}, 5},
		{"last record's payload zeroed", func(d []byte, last int64) []byte {
			clear(d[last+recordHeaderSize+3:])
			return d
		}, 4},
		{"last record zeroed and zeros after", func(d []byte, last int64) []byte {
			clear(d[last:])
			return append(d, make([]byte, 10000)...)
		}, 4},
		{"garbage after the last record", func(d []byte, _ int64) []byte {
			junk := make([]byte, 3000)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range junk {
				junk[i] = byte(r.Uint32())
			}
			return append(d, junk...)
		}, 5},
		{"bad checksum in the final record", func(d []byte, last int64) []byte {
			d[len(d)-1] ^= 1
			return d
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			buildLog(t, dir, 5, 0)
			path := segmentPath(dir, 1)
			data, _ := os.ReadFile(path)
			offs := recordOffsets(t, path)
			if err := os.WriteFile(path, tc.damage(data, offs[len(offs)-1]), 0o644); err != nil {
				t.Fatal(err)
			}
			var logs logBuf
			reopenKeeps(t, dir, tc.keep, &logs)
			if !strings.Contains(logs.String(), "torn") {
				t.Fatalf("no torn-tail warning: %q", logs.String())
			}
		})
	}
}

func TestCorruptMiddleRecord(t *testing.T) {
	src := t.TempDir()
	buildLog(t, src, 10, 0)
	offs := recordOffsets(t, segmentPath(src, 1))
	bad := offs[4] // record 5
	// Every header byte, the first and the last payload byte.
	positions := []int64{}
	for i := int64(0); i < recordHeaderSize; i++ {
		positions = append(positions, bad+i)
	}
	positions = append(positions, bad+recordHeaderSize, offs[5]-1)
	for _, pos := range positions {
		dir := t.TempDir()
		copyDir(t, src, dir)
		path := segmentPath(dir, 1)
		flipByte(t, path, pos)

		_, err := Open(dir, Options{Logger: quiet()})
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("flip at %d: Open returned %v, want *CorruptError", pos, err)
		}
		if ce.File != path || ce.Offset != bad {
			t.Fatalf("flip at %d: CorruptError names %s@%d, want %s@%d", pos, ce.File, ce.Offset, path, bad)
		}
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprint(bad)) {
			t.Fatalf("message does not name file and offset: %s", msg)
		}
		info, _ := os.Stat(path)
		dropped, err := Repair(dir)
		if err != nil {
			t.Fatalf("Repair: %v", err)
		}
		if dropped != info.Size()-bad {
			t.Fatalf("Repair dropped %d bytes, want %d", dropped, info.Size()-bad)
		}
		reopenKeeps(t, dir, 4, nil)
		if dropped, err := Repair(dir); err != nil || dropped != 0 {
			t.Fatalf("Repair of a healthy log: %d, %v", dropped, err)
		}
	}
}

func TestCorruptionInMiddleSegment(t *testing.T) {
	src := t.TempDir()
	buildLog(t, src, 60, 1<<10)
	files := segmentFiles(t, src)
	if len(files) < 4 {
		t.Fatalf("want at least 4 segments, got %d", len(files))
	}
	t.Run("bad final record of a sealed segment", func(t *testing.T) {
		dir := t.TempDir()
		copyDir(t, src, dir)
		path := filepath.Join(dir, filepath.Base(files[1]))
		offs := recordOffsets(t, path)
		last := offs[len(offs)-1]
		flipByte(t, path, last+4) // its checksum
		// A torn-looking tail, but not in the last segment: corruption.
		_, err := Open(dir, Options{Logger: quiet()})
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != path || ce.Offset != last {
			t.Fatalf("Open: %v, want *CorruptError at %s@%d", err, path, last)
		}
		keep := recordsBefore(t, dir, path, last)
		if _, err := Repair(dir); err != nil {
			t.Fatal(err)
		}
		if n := len(segmentFiles(t, dir)); n != 2 {
			t.Fatalf("%d segments after Repair, want 2", n)
		}
		reopenKeeps(t, dir, keep, nil)
	})
	t.Run("missing segment", func(t *testing.T) {
		dir := t.TempDir()
		copyDir(t, src, dir)
		gone := filepath.Join(dir, filepath.Base(files[2]))
		if err := os.Remove(gone); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{Logger: quiet()})
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != filepath.Join(dir, filepath.Base(files[3])) || !strings.Contains(ce.Reason, "missing") {
			t.Fatalf("Open: %v, want *CorruptError about the segment after the gap", err)
		}
		first, _ := parseSegmentName(filepath.Base(files[2]))
		if _, err := Repair(dir); err != nil {
			t.Fatal(err)
		}
		reopenKeeps(t, dir, int(first-1), nil)
	})
}

// recordsBefore counts the records of dir's log that precede offset off of
// segment path.
func recordsBefore(t *testing.T, dir, path string, off int64) int {
	t.Helper()
	first, _ := parseSegmentName(filepath.Base(path))
	n := int(first - 1)
	for _, o := range recordOffsets(t, path) {
		if o < off {
			n++
		}
	}
	return n
}

func TestCorruptSegmentHeader(t *testing.T) {
	src := t.TempDir()
	buildLog(t, src, 40, 1<<10)
	files := segmentFiles(t, src)
	if len(files) < 3 {
		t.Fatalf("want at least 3 segments, got %d", len(files))
	}
	for _, which := range []int{0, 1, len(files) - 1} {
		for pos := int64(0); pos < headerSize; pos++ {
			dir := t.TempDir()
			copyDir(t, src, dir)
			path := filepath.Join(dir, filepath.Base(files[which]))
			flipByte(t, path, pos)
			_, err := Open(dir, Options{Logger: quiet()})
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != path || ce.Offset != 0 {
				t.Fatalf("segment %d, flip at %d: Open returned %v, want *CorruptError at %s@0", which, pos, err, path)
			}
			if pos >= 8 && pos < 12 && !strings.Contains(ce.Reason, "version") {
				t.Fatalf("flipped version byte, reason %q does not say so", ce.Reason)
			}
			if pos > 0 {
				continue // Repair once per segment is enough
			}
			if _, err := Repair(dir); err != nil {
				t.Fatal(err)
			}
			first, _ := parseSegmentName(filepath.Base(files[which]))
			reopenKeeps(t, dir, int(first-1), nil)
			if which == 0 {
				// The log restarts where it started, not at 1.
				l := mustOpen(t, dir, Options{})
				if l.FirstIndex() != first {
					t.Fatalf("after Repair FirstIndex %d, want %d", l.FirstIndex(), first)
				}
				mustClose(t, l)
			}
		}
	}
}

func TestTruncatedSegmentHeader(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 3, 0)
	path := segmentPath(dir, 1)
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, data[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{Logger: quiet()})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != 0 || !strings.Contains(ce.Reason, "shorter") {
		t.Fatalf("Open: %v, want *CorruptError about a short header", err)
	}
}

// A record that verifies but carries the wrong index (a misplaced block) is
// corruption even at the tail: it is not what a torn write produces.
func TestMisplacedRecordAtTail(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 3, 0)
	path := segmentPath(dir, 1)
	data, _ := os.ReadFile(path)
	data = appendRecord(data, 7, []byte("from elsewhere"), crc32c([]byte("from elsewhere")))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{Logger: quiet()})
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "index 7") {
		t.Fatalf("Open: %v, want *CorruptError about index 7", err)
	}
}

func TestReplayDetectsLaterDamage(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncNone})
	defer mustClose(t, l)
	appendN(t, l, 1, 10)
	offs := recordOffsets(t, segmentPath(dir, 1))
	flipByte(t, segmentPath(dir, 1), offs[6]+recordHeaderSize)
	err := l.Replay(1, func(uint64, []byte) error { return nil })
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != offs[6] {
		t.Fatalf("Replay over a rotted record: %v, want *CorruptError at %d", err, offs[6])
	}
	if !bytes.Contains([]byte(err.Error()), []byte("repair")) {
		t.Fatalf("message does not point to repair: %v", err)
	}
}
