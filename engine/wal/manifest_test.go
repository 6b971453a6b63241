package wal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openMissing expects Open to refuse dir because segments are missing,
// naming want (the newest missing segment's file).
func openMissing(t *testing.T, dir, want string) *CorruptError {
	t.Helper()
	l, err := Open(dir, Options{Sync: SyncNone, Logger: quiet()})
	if err == nil {
		l.Close()
		t.Fatal("Open started a log whose tail segments are missing")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || !ce.Missing {
		t.Fatalf("Open: %v, want a *CorruptError with Missing", err)
	}
	if filepath.Base(ce.File) != filepath.Base(want) || !strings.Contains(err.Error(), filepath.Base(want)) ||
		!strings.Contains(err.Error(), "tally repair") {
		t.Fatalf("error %q does not name the missing %s and the way out", err, filepath.Base(want))
	}
	return ce
}

// lastIndexOf opens the log in dir and returns its last index.
func lastIndexOf(t *testing.T, dir string) uint64 {
	t.Helper()
	l := mustOpen(t, dir, Options{Sync: SyncNone})
	defer mustClose(t, l)
	return l.LastIndex()
}

func TestMissingTailSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 300, 2048)
	segs := segmentFiles(t, dir)
	if len(segs) < 4 {
		t.Fatalf("%d segments, want at least 4", len(segs))
	}
	full := lastIndexOf(t, dir)
	// The newest segment deleted: nothing in the names shows a gap.
	newest := segs[len(segs)-1]
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}
	openMissing(t, dir, newest)
	// Refusing changes nothing: a second start refuses the same way.
	openMissing(t, dir, newest)

	// The two newest deleted: the error names the newest one the
	// manifest knows.
	if err := os.Remove(segs[len(segs)-2]); err != nil {
		t.Fatal(err)
	}
	openMissing(t, dir, newest)

	// Repair accepts the loss: the log then ends with the newest segment
	// left, and continues from its last record.
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, Options{Sync: SyncNone})
	last := l.LastIndex()
	if last == 0 || last >= full {
		t.Fatalf("after repair the log ends at %d (was %d)", last, full)
	}
	checkRecords(t, replayAll(t, l, 1), 1, int(last))
	appendN(t, l, int(last)+1, 30)
	mustClose(t, l)
	reopenKeeps(t, dir, int(last)+30, nil)

	// The manifest follows rotations after the repair: losing the new
	// tail is caught again.
	segs = segmentFiles(t, dir)
	if err := os.Remove(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	openMissing(t, dir, segs[len(segs)-1])
}

func TestEveryLogSegmentMissingRefused(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 100, 2048)
	segs := segmentFiles(t, dir)
	for _, s := range segs {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	openMissing(t, dir, segs[len(segs)-1])
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	// Accepted: a fresh log where the caller says it starts.
	l := mustOpen(t, dir, Options{Sync: SyncNone, FirstIndex: 500})
	if l.FirstIndex() != 500 || l.LastIndex() != 499 {
		t.Fatalf("after repair: first %d last %d, want 500, 499", l.FirstIndex(), l.LastIndex())
	}
	mustClose(t, l)
}

// A log written before manifests opens as before and gets one; from then
// on a missing tail is caught.
func TestLogWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 200, 2048)
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	reopenKeeps(t, dir, 200, nil)
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err != nil {
		t.Fatalf("Open did not write a manifest: %v", err)
	}
	segs := segmentFiles(t, dir)
	if err := os.Remove(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	openMissing(t, dir, segs[len(segs)-1])
}

// A crash between a new segment's rename and its manifest's leaves the
// manifest one segment behind: that is no loss, and Open corrects it.
func TestManifestBehindNewestSegment(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 200, 2048)
	segs := segmentFiles(t, dir)
	older, ok := parseSegmentName(filepath.Base(segs[len(segs)-2]))
	if !ok {
		t.Fatal(segs)
	}
	if err := writeManifest(dir, older, false); err != nil {
		t.Fatal(err)
	}
	reopenKeeps(t, dir, 200, nil)
	newest, ok, err := readManifest(dir)
	if err != nil || !ok {
		t.Fatalf("manifest: %v %v", ok, err)
	}
	if segmentName(newest) != filepath.Base(segmentFiles(t, dir)[len(segmentFiles(t, dir))-1]) {
		t.Fatalf("manifest names %s, not the newest segment", segmentName(newest))
	}
}

func TestDamagedManifest(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 50, 2048)
	flipByte(t, filepath.Join(dir, ManifestName), 14)
	_, err := Open(dir, Options{Sync: SyncNone, Logger: quiet()})
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), ManifestName) {
		t.Fatalf("Open with a damaged manifest: %v", err)
	}
	if _, err := Repair(dir); err != nil {
		t.Fatal(err)
	}
	reopenKeeps(t, dir, 50, nil)
}
