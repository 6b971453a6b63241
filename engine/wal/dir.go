package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// CorruptError reports damage that is not a torn tail: a bad record with
// valid data after it, a bad segment header, a missing segment. The log is
// not loaded; Repair truncates it at this spot.
type CorruptError struct {
	File   string // path of the damaged segment file (or of the first missing one)
	Offset int64  // byte offset of the bad record; 0 for a bad header or a misplaced segment
	Reason string
	// Missing: segments the manifest says were created are gone (the
	// newest, or all of them); File names the newest of those. Repair
	// accepts the loss by recording the newest segment left.
	Missing bool
}

// VersionError reports a log file of another format version than the one
// this build reads and writes: a segment (Format "log segment") or the
// manifest ("log manifest"; Found 0: segments holding records but no
// manifest, which every build since manifests writes before its first
// record). Open refuses the whole log; Repair does not touch it.
type VersionError struct {
	File   string
	Format string
	Found  uint32
	Want   uint32
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("wal: %s is %s format version %d; this build reads version %d", e.File, e.Format, e.Found, e.Want)
}

func (e *CorruptError) Error() string {
	if e.Missing {
		return fmt.Sprintf("wal: log incomplete: %s is missing: %s; refusing to start without acknowledged records", e.File, e.Reason)
	}
	return fmt.Sprintf("wal: log corrupt in %s at offset %d: %s; refusing to load a partial log "+
		"(`tally repair` truncates the log there, dropping every record after it)", e.File, e.Offset, e.Reason)
}

// segment is one segment file; size is kept up to date for every segment
// but the active one, whose size the writer tracks.
type segment struct {
	first uint64
	size  int64
}

func segmentPath(dir string, first uint64) string {
	return filepath.Join(dir, segmentName(first))
}

// listSegments returns the directory's segments in index order.
func listSegments(dir string) ([]segment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, e := range entries {
		first, ok := parseSegmentName(e.Name())
		if !ok {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("wal: %s is not a regular file", filepath.Join(dir, e.Name()))
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		segs = append(segs, segment{first: first, size: info.Size()})
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	return segs, nil
}

// removeTempFiles deletes segments whose creation never finished: they
// were never renamed into place, so they never held a record.
func removeTempFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		_, seg := parseSegmentName(strings.TrimSuffix(name, tmpSuffix))
		if (seg || name == ManifestName+tmpSuffix) && strings.HasSuffix(name, tmpSuffix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// dirScan is the outcome of verifying every segment of a directory.
type dirScan struct {
	segs []segment
	// last is the index of the last valid record before any damage.
	last uint64
	// badSeg is the index in segs of the damaged segment, -1 if none.
	badSeg int
	bad    *damage
}

// torn reports whether the only damage is a torn tail of the last segment.
func (s *dirScan) torn() bool {
	return s.bad != nil && s.badSeg == len(s.segs)-1 && s.bad.canBeTorn && !s.bad.validAfter
}

// versionError returns the *VersionError of a segment of another format
// version, if the scan stopped at one.
func (s *dirScan) versionError(dir string) error {
	if s.bad == nil || !s.bad.otherVersion {
		return nil
	}
	return &VersionError{File: segmentPath(dir, s.segs[s.badSeg].first), Format: "log segment",
		Found: s.bad.version, Want: formatVersion}
}

func (s *dirScan) corruptError(dir string) *CorruptError {
	return &CorruptError{File: segmentPath(dir, s.segs[s.badSeg].first), Offset: s.bad.offset, Reason: s.bad.reason}
}

// scanDir verifies every record of every segment and stops at the first
// damage. It does not modify anything.
func scanDir(dir string) (*dirScan, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	s := &dirScan{segs: segs, badSeg: -1}
	sc := newScanner()
	for i, seg := range segs {
		if i > 0 && seg.first != s.last+1 {
			s.badSeg = i
			s.bad = &damage{reason: fmt.Sprintf("segment starts at index %d but the previous one ends at %d (a segment is missing or misplaced)", seg.first, s.last)}
			return s, nil
		}
		res, err := scanFile(sc, segmentPath(dir, seg.first), seg, i == len(segs)-1)
		if err != nil {
			return nil, err
		}
		s.last = res.last
		if res.bad != nil {
			s.badSeg = i
			s.bad = res.bad
			return s, nil
		}
	}
	return s, nil
}

func scanFile(sc *scanner, path string, seg segment, isLast bool) (segScan, error) {
	f, err := os.Open(path)
	if err != nil {
		return segScan{}, err
	}
	defer f.Close()
	res, err := sc.scanSegment(f, seg.size, seg.first, isLast, nil)
	if err != nil {
		return res, fmt.Errorf("wal: %s: %w", path, err)
	}
	return res, nil
}

// Repair truncates the log in dir at its first bad spot: the damaged
// segment is cut just before the bad record (or deleted, if its header is
// bad or it is misplaced) and every later segment is deleted. It returns
// the number of bytes dropped; every record in them is lost. A log without
// damage is left as it is and Repair returns 0. A torn tail counts as
// damage here and is cut the same way Open would cut it.
//
// This is the way out of a *CorruptError (`tally repair`), for an operator
// who accepts losing the records after the damage. It must not run while a
// Log has the directory open; the lock file makes it fail if one does. A
// log of another format version is not damage: Repair refuses it with the
// *VersionError Open gives, and changes nothing.
func Repair(dir string) (dropped int64, err error) {
	unlock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if err := removeTempFiles(dir); err != nil {
		return 0, err
	}
	s, err := scanDir(dir)
	if err != nil {
		return 0, err
	}
	if err := s.versionError(dir); err != nil {
		return 0, err // another format, not damage
	}
	if s.bad == nil {
		return 0, repairManifest(dir, s.segs)
	}
	// Later segments go first, so that an interrupted repair leaves a
	// contiguous prefix of the log that the next Repair can continue from.
	for i := len(s.segs) - 1; i > s.badSeg; i-- {
		if err := os.Remove(segmentPath(dir, s.segs[i].first)); err != nil {
			return dropped, fmt.Errorf("wal: repair: %w", err)
		}
		dropped += s.segs[i].size
	}
	bad := s.segs[s.badSeg]
	path := segmentPath(dir, bad.first)
	kept := s.segs[:s.badSeg+1]
	if s.bad.offset < headerSize {
		if err := os.Remove(path); err != nil {
			return dropped, fmt.Errorf("wal: repair: %w", err)
		}
		dropped += bad.size
		kept = kept[:len(kept)-1]
		if s.badSeg == 0 {
			// Keep the log's starting index: a snapshot may cover every
			// index below it, and a log restarting at 1 would be skipped.
			f, err := createSegment(dir, bad.first, true)
			if err != nil {
				return dropped, fmt.Errorf("wal: repair: %w", err)
			}
			if err := f.Close(); err != nil {
				return dropped, fmt.Errorf("wal: repair: %w", err)
			}
			kept = []segment{bad}
		}
	} else {
		if err := truncateFile(path, s.bad.offset, true); err != nil {
			return dropped, fmt.Errorf("wal: repair: %w", err)
		}
		dropped += bad.size - s.bad.offset
	}
	if err := repairManifest(dir, kept); err != nil {
		return dropped, err
	}
	if err := syncDir(dir); err != nil {
		return dropped, fmt.Errorf("wal: repair: %w", err)
	}
	return dropped, nil
}

// repairManifest makes the manifest name the newest segment left (or
// removes it when none is), which is how Repair accepts the loss of
// missing tail segments.
func repairManifest(dir string, segs []segment) error {
	_, err := checkManifest(dir, segs)
	if ve := (*VersionError)(nil); err == nil || errors.As(err, &ve) {
		return err // nothing to repair, or another format: not damage
	}
	if len(segs) == 0 {
		return RemoveManifest(dir)
	}
	if err := writeManifest(dir, segs[len(segs)-1].first, true); err != nil {
		return fmt.Errorf("wal: repair: %w", err)
	}
	return syncDir(dir)
}

func truncateFile(path string, size int64, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// createSegment makes a segment holding only its header, atomically: a
// crash leaves either no segment or one with a valid header, never a
// half-written header that would read as corruption. The returned file is
// open for appending.
func createSegment(dir string, first uint64, sync bool) (*os.File, error) {
	final := segmentPath(dir, first)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if _, err := f.Write(appendSegmentHeader(nil, first)); err != nil {
		return fail(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return fail(err)
	}
	if err := writeManifest(dir, first, sync); err != nil {
		f.Close()
		return nil, err
	}
	if sync {
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// syncDir makes creations, renames and removals in dir durable; fsyncing a
// file does not persist its directory entry.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
