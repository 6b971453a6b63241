package wal

import (
	"errors"
	"hash/crc32"
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

// A log of another format is refused whole, and Repair leaves it as it
// is: segments holding records with no manifest (logs before manifests),
// a manifest or a segment header of another version (older or newer).
func TestOtherFormatRefused(t *testing.T) {
	src := t.TempDir()
	buildLog(t, src, 200, 2048)
	segs := segmentFiles(t, src)
	versionAt := func(path string, v uint32) func(t *testing.T) {
		return func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			le.PutUint32(b[8:12], v)
			le.PutUint32(b[20:24], crc32.Checksum(b[:20], castagnoli))
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		file   string // relative to the log's directory
		format string
		found  uint32
		change func(dir string) func(t *testing.T)
	}{
		{"no manifest", ManifestName, "log manifest", 0, func(dir string) func(t *testing.T) {
			return func(t *testing.T) {
				if err := os.Remove(manifestPath(dir)); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"older manifest", ManifestName, "log manifest", 0, func(dir string) func(t *testing.T) {
			return versionAt(manifestPath(dir), 0)
		}},
		{"newer manifest", ManifestName, "log manifest", manifestVersion + 1, func(dir string) func(t *testing.T) {
			return versionAt(manifestPath(dir), manifestVersion+1)
		}},
		{"older segment", filepath.Base(segs[0]), "log segment", 0, func(dir string) func(t *testing.T) {
			return versionAt(filepath.Join(dir, filepath.Base(segs[0])), 0)
		}},
		{"newer segment", filepath.Base(segs[0]), "log segment", formatVersion + 1, func(dir string) func(t *testing.T) {
			return versionAt(filepath.Join(dir, filepath.Base(segs[0])), formatVersion+1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, src, dir)
			c.change(dir)(t)
			before := dirBytes(t, dir)
			_, err := Open(dir, Options{Sync: SyncNone, Logger: quiet()})
			var ve *VersionError
			if !errors.As(err, &ve) || ve.File != filepath.Join(dir, c.file) || ve.Format != c.format || ve.Found != c.found {
				t.Fatalf("Open: %v, want a *VersionError of %s format %d at %s", err, c.format, c.found, c.file)
			}
			if _, err := Repair(dir); !errors.As(err, &ve) {
				t.Fatalf("Repair: %v, want the *VersionError", err)
			}
			if after := dirBytes(t, dir); after != before {
				t.Fatal("Open or Repair changed a log of another format")
			}
		})
	}
}

// dirBytes renders every file of dir, names and contents, for comparing
// a directory before and after.
func dirBytes(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.Name() + "\n" + string(data) + "\n")
	}
	return b.String()
}

// A crash while creating a log's first segment, between its rename and
// the manifest's, leaves one segment with no record and no manifest:
// that log opens, and gets its manifest.
func TestFirstSegmentWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	mustClose(t, mustOpen(t, dir, Options{Sync: SyncNone}))
	if err := os.Remove(manifestPath(dir)); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, Options{Sync: SyncNone})
	appendN(t, l, 1, 3)
	mustClose(t, l)
	if _, err := os.Stat(manifestPath(dir)); err != nil {
		t.Fatalf("Open did not write a manifest: %v", err)
	}
	reopenKeeps(t, dir, 3, nil)
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
