package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	namePrefix    = "snap-"
	nameSuffix    = ".snap"
	tmpSuffix     = ".tmp"
	corruptSuffix = ".corrupt"
	pruneSuffix   = ".prune"
)

// FileName returns the name of the snapshot covering records up to index.
func FileName(index uint64) string {
	return fmt.Sprintf("%s%016x%s", namePrefix, index, nameSuffix)
}

// ParseName returns the index a snapshot's file name carries. It accepts
// exactly the names FileName makes, so that stray files (an editor's
// backup, a .corrupt file) are never taken for a snapshot.
func ParseName(name string) (uint64, bool) {
	const n = len(namePrefix) + 16 + len(nameSuffix)
	if len(name) != n || !strings.HasPrefix(name, namePrefix) || !strings.HasSuffix(name, nameSuffix) {
		return 0, false
	}
	hex := name[len(namePrefix) : len(namePrefix)+16]
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return v, err == nil
}

// Info names one snapshot file of a directory.
type Info struct {
	Index uint64
	Path  string
}

// List returns the snapshots in dir, oldest (lowest index) first.
func List(dir string) ([]Info, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var out []Info
	for _, e := range entries {
		idx, ok := ParseName(e.Name())
		if !ok {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("snapshot: %s is not a regular file", filepath.Join(dir, e.Name()))
		}
		out = append(out, Info{Index: idx, Path: filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.Index < b.Index:
			return -1
		case a.Index > b.Index:
			return 1
		}
		return 0
	})
	return out, nil
}

// RemoveTemp deletes snapshots whose writing never finished (.tmp: they
// never got their final name) and snapshots a prune had begun to delete
// (.prune): nothing depends on either.
func RemoveTemp(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !isGarbage(name) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// isGarbage reports whether name is a snapshot's .tmp or .prune file.
func isGarbage(name string) bool {
	for _, suffix := range []string{tmpSuffix, pruneSuffix} {
		if _, ok := ParseName(strings.TrimSuffix(name, suffix)); ok && strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// PruneStepBytes is how much of a pruned snapshot's file Prune frees at a
// time by default.
const PruneStepBytes = 4 << 20

// Prune deletes all but the newest keep snapshots of dir and returns the
// paths it deleted, calling step (when not nil) between the steps of the
// deletion so that the caller can pace it against other users of the
// disk. Unlinking a large file frees all its extents in one filesystem
// transaction, and a log's fsync on the same filesystem waits for it; so
// each file is first renamed to <name>.prune (never loaded, deleted by
// RemoveTemp at the next start) and, with sync, the directory fsynced
// once for all of them, then shrunk from its end a step at a time and
// unlinked (stepBytes at a time; PruneStepBytes when stepBytes is
// zero). A crash at any point leaves each file whole under its
// name or a .prune file, never a shortened snapshot under a snapshot's
// name. The unlinks are not fsynced here: a .prune file that comes back
// after a crash is garbage either way.
func Prune(dir string, keep int, sync bool, stepBytes int64, step func()) ([]string, error) {
	if stepBytes <= 0 {
		stepBytes = PruneStepBytes
	}
	list, err := List(dir)
	if err != nil || len(list) <= keep {
		return nil, err
	}
	victims := list[:len(list)-keep]
	var renamed []string
	for _, v := range victims {
		if err := os.Rename(v.Path, v.Path+pruneSuffix); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("snapshot: prune: %w", err)
		}
		renamed = append(renamed, v.Path)
	}
	if len(renamed) > 0 && sync {
		if err := SyncDir(dir); err != nil {
			return nil, fmt.Errorf("snapshot: prune: %w", err)
		}
	}
	for i, path := range renamed {
		if err := removeInSteps(path+pruneSuffix, stepBytes, step); err != nil {
			return renamed[:i], fmt.Errorf("snapshot: prune: %w", err)
		}
	}
	return renamed, nil
}

// removeInSteps shrinks the file at path stepBytes at a time from its
// end, calling step after each, then unlinks it.
func removeInSteps(path string, stepBytes int64, step func()) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	for size := info.Size(); size > stepBytes; {
		size -= stepBytes
		if err := os.Truncate(path, size); err != nil {
			return err
		}
		if step != nil {
			step()
		}
	}
	return os.Remove(path)
}

// MoveAside renames a snapshot to <name>.corrupt (or .corrupt.N if that is
// taken), so that it is no longer loaded but stays for inspection, and
// returns the new path.
func MoveAside(path string) (string, error) {
	to := path + corruptSuffix
	for i := 1; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
			break
		}
		to = fmt.Sprintf("%s%s.%d", path, corruptSuffix, i)
	}
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return to, err
	}
	return to, nil
}

// SyncDir makes creations, renames and removals in dir durable; fsyncing a
// file does not persist its directory entry.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapshot: sync %s: %w", dir, err)
	}
	return nil
}

// File is a snapshot being written into a directory under a temporary
// name. Commit gives it its final name; Abort deletes it.
type File struct {
	*Writer
	f     *os.File
	sw    *syncWriter
	dir   string
	tmp   string
	final string
	sync  bool
	done  bool
}

// Create starts the snapshot covering records up to index in dir. With
// sync false nothing is fsynced (for tests and -fsync none).
func Create(dir string, index uint64, sync bool) (*File, error) {
	final := filepath.Join(dir, FileName(index))
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	sw := &syncWriter{f: f, sync: sync}
	w, err := NewWriter(sw, index)
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("snapshot: write %s: %w", tmp, err)
	}
	return &File{Writer: w, f: f, sw: sw, dir: dir, tmp: tmp, final: final, sync: sync}, nil
}

// Commit finishes the snapshot, fsyncs it, renames it to its final name
// and fsyncs the directory, calling step (when not nil) between these so
// that the caller can pace them against other users of the disk. A step
// before the rename that returns an error (the caller gave up meanwhile)
// abandons the snapshot; after the rename the snapshot is in place and
// step only paces. It returns the final path. On error the temporary file
// is deleted and no snapshot was added.
func (f *File) Commit(step func() error) (string, error) {
	if step == nil {
		step = func() error { return nil }
	}
	if f.done {
		return "", errors.New("snapshot: Commit after Commit or Abort")
	}
	f.done = true
	fail := func(err error) (string, error) {
		f.f.Close()
		os.Remove(f.tmp)
		return "", fmt.Errorf("snapshot: write %s: %w", f.tmp, err)
	}
	if _, err := f.Finish(); err != nil {
		return fail(err)
	}
	if err := step(); err != nil {
		return fail(err)
	}
	if f.sync {
		if err := f.f.Sync(); err != nil {
			return fail(err)
		}
		if err := step(); err != nil {
			return fail(err)
		}
	}
	if err := f.f.Close(); err != nil {
		os.Remove(f.tmp)
		return "", fmt.Errorf("snapshot: close %s: %w", f.tmp, err)
	}
	if err := os.Rename(f.tmp, f.final); err != nil {
		os.Remove(f.tmp)
		return "", fmt.Errorf("snapshot: %w", err)
	}
	_ = step()
	if f.sync {
		if err := SyncDir(f.dir); err != nil {
			return f.final, err
		}
	}
	return f.final, nil
}

// Abort deletes the unfinished snapshot.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.tmp)
}

// syncWriter has the file written back as it grows (writeback), so that
// dirty pages never pile up: a final fsync over the whole file would hold
// the disk for as long as it takes to write it, and the log's
// group-commit fsyncs on the same disk would queue behind it.
type syncWriter struct {
	f       *os.File
	sync    bool
	off     int64 // bytes written
	flushed int64 // bytes whose writeback was started
	wb      writeback
}

func (w *syncWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if err != nil || !w.sync {
		return n, err
	}
	if w.off-w.flushed >= WritebackBytes {
		if err := w.wb.step(w.f, w.flushed, w.off); err != nil {
			return n, fmt.Errorf("snapshot: write back %s: %w", w.f.Name(), err)
		}
		w.flushed = w.off
	}
	return n, nil
}
