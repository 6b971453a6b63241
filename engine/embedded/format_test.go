package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/snapshot"
	"github.com/tally-dev/tally/engine/wal"
)

// TestOlderFormatsRefused: a data directory holding a file of another
// format version than this build's — a log record, the snapshot's state
// (META), the snapshot file, a log segment, the log's manifest, or a log
// without one — is refused by Open with a message naming the directory,
// the format, the version found and the one this build reads, and what to
// do; Repair refuses it too and changes nothing.
func TestOlderFormatsRefused(t *testing.T) {
	// withLog is a directory whose log holds a few records.
	withLog := func(t *testing.T) string {
		dir := t.TempDir()
		e := openE(t, durableOpts(dir, nil))
		_, err := e.CreatePost(bg, 1, 0, "k")
		ok(t, err)
		ok(t, e.Close())
		return dir
	}
	// withSnapshot is a directory with a snapshot and a log after it.
	withSnapshot := func(t *testing.T) (string, string) {
		dir := t.TempDir()
		e := openE(t, durableOpts(dir, nil))
		_, err := e.CreatePost(bg, 1, 0, "")
		ok(t, err)
		ok(t, e.Snapshot(bg))
		ok(t, e.Close())
		list := snapshots(t, dir)
		return dir, list[len(list)-1].Path
	}
	segment := func(t *testing.T, dir string) string {
		segs, err := filepath.Glob(filepath.Join(dir, "wal-*.log"))
		ok(t, err)
		return segs[0]
	}
	for _, c := range []struct {
		name   string
		format string
		found  uint64
		want   uint64
		make   func(t *testing.T) string // the directory
	}{
		{"log record", "log record", recordVersion - 1, recordVersion, func(t *testing.T) string {
			dir := t.TempDir()
			l, err := wal.Open(dir, wal.Options{Sync: wal.SyncNone})
			ok(t, err)
			rec := appendRecord(nil, &createPostRec{recHeader{time: 1}, ops.CreatePost{Viewer: 1, Post: 1 << 30}})
			rec[0] = recordVersion - 1
			_, err = l.Append(rec)
			ok(t, err)
			ok(t, l.Close())
			return dir
		}},
		{"snapshot state", "snapshot state", stateVersion - 1, stateVersion, func(t *testing.T) string {
			// An older META: its version and what that version's META
			// held after it, then sections this version does not have.
			dir := t.TempDir()
			f, err := snapshot.Create(dir, 0, false)
			ok(t, err)
			f.Begin(tagMeta)
			b := binary.AppendUvarint(f.Buf(), stateVersion-1)
			f.Item(binary.AppendVarint(b, 12345))
			f.End()
			f.Begin(snapshot.MakeTag("PREG"))
			f.Item(append(f.Buf(), 1))
			f.End()
			_, err = f.Commit(nil)
			ok(t, err)
			return dir
		}},
		{"snapshot file", "snapshot file", snapshot.Version - 1, snapshot.Version, func(t *testing.T) string {
			dir, snap := withSnapshot(t)
			rewriteVersion(t, snap, snapshot.Version-1)
			return dir
		}},
		{"snapshot file, newer", "snapshot file", snapshot.Version + 1, snapshot.Version, func(t *testing.T) string {
			dir, snap := withSnapshot(t)
			rewriteVersion(t, snap, snapshot.Version+1)
			return dir
		}},
		{"log segment", "log segment", 0, 1, func(t *testing.T) string {
			dir := withLog(t)
			rewriteVersion(t, segment(t, dir), 0)
			return dir
		}},
		{"log manifest", "log manifest", 0, 1, func(t *testing.T) string {
			dir := withLog(t)
			rewriteVersion(t, filepath.Join(dir, wal.ManifestName), 0)
			return dir
		}},
		{"log without a manifest", "log manifest", 0, 1, func(t *testing.T) string {
			dir := withLog(t)
			ok(t, os.Remove(filepath.Join(dir, wal.ManifestName)))
			return dir
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.make(t)
			before := dirFiles(t, dir)
			_, err := Open(durableOpts(dir, nil))
			var fe *engine.FormatError
			if !errors.As(err, &fe) || fe.Format != c.format || fe.Found != c.found || fe.Want != c.want {
				t.Fatalf("Open: %v, want a format error for %s format %d", err, c.format, c.found)
			}
			msg := err.Error()
			wantText := []string{"data directory " + dir,
				fmt.Sprintf("(%s format %d)", c.format, c.found),
				fmt.Sprintf("this build reads %s format %d", c.format, c.want)}
			if c.found < c.want {
				wantText = append(wantText, "older development build of Tally", "start from an empty -data directory")
			} else {
				wantText = append(wantText, "newer build of Tally", "run the newer build")
			}
			for _, w := range wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("Open's error does not say %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "repair") || strings.Contains(msg, "corrupt") {
				t.Errorf("Open's error calls another format damage:\n%s", msg)
			}
			if _, err := Repair(dir); !errors.As(err, &fe) {
				t.Errorf("Repair: %v, want the format error", err)
			}
			if after := dirFiles(t, dir); after != before {
				t.Errorf("Open or Repair changed the directory:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// TestRestoreRefusesOlderBackup: a backup of another format is refused
// before anything is installed, with the same kind of message.
func TestRestoreRefusesOlderBackup(t *testing.T) {
	dir := t.TempDir()
	e := openE(t, durableOpts(dir, nil))
	_, err := e.CreatePost(bg, 1, 0, "")
	ok(t, err)
	ok(t, e.Close())
	file := filepath.Join(t.TempDir(), "b.snap")
	_, err = BackupFile(bg, dir, file)
	ok(t, err)
	rewriteVersion(t, file, snapshot.Version-1)
	into := filepath.Join(t.TempDir(), "restored")
	err = Restore(file, into)
	var fe *engine.FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "backup "+file+" was written by an older development build") {
		t.Fatalf("Restore of an older backup: %v", err)
	}
	if _, err := os.Stat(into); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Restore of an older backup made %s: %v", into, err)
	}
}

// rewriteVersion sets the 4-byte version at offset 8 of a file whose
// first 24 bytes are magic, version, 8 bytes, CRC32C of bytes 0..20 (the
// snapshot's header, a log segment's, the log's manifest).
func rewriteVersion(t *testing.T, path string, v uint32) {
	b, err := os.ReadFile(path)
	ok(t, err)
	binary.LittleEndian.PutUint32(b[8:12], v)
	binary.LittleEndian.PutUint32(b[20:24], crc32.Checksum(b[:20], crc32.MakeTable(crc32.Castagnoli)))
	ok(t, os.WriteFile(path, b, 0o644))
}

// dirFiles lists dir's files with their sizes and contents' checksums
// (the lock file aside), for comparing a directory before and after.
func dirFiles(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	ok(t, err)
	var b strings.Builder
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lock") || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		ok(t, err)
		fmt.Fprintf(&b, "%s:%d:%08x ", e.Name(), len(data), crc32.ChecksumIEEE(data))
	}
	return b.String()
}
