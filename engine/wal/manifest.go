package wal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The manifest names the newest segment the log has created, so that Open
// can tell a log whose tail segments were deleted from one that simply
// ends: segment names alone show a gap in the middle, never a missing end.
//
// ManifestName holds 24 bytes, little-endian:
//
//	offset  size  field
//	0       8     magic "TALLYWMF"
//	8       4     format version, uint32 (1)
//	12      8     first index of the newest segment created, uint64
//	20      4     CRC32C (Castagnoli) of bytes 0..20
//
// createSegment rewrites it (tmp file, fsync, rename) right after renaming
// a new segment into place and before the directory fsync that makes both
// durable. A crash between the two renames leaves the manifest one
// segment behind, which Open accepts (the newest segment is newer than the
// manifest says) and corrects; a newest segment older than the manifest,
// or none at all, means segments were lost, and Open refuses with a
// *CorruptError whose Missing is set. Segments holding records with no
// manifest beside them are a log of an older format (before manifests):
// Open refuses them with a *VersionError. The one log that has segments
// and no manifest is one that crashed while creating its first segment,
// before any record: Open writes its manifest.
const ManifestName = "wal.manifest"

const (
	manifestMagic   = "TALLYWMF"
	manifestVersion = 1
	manifestSize    = 24
)

func manifestPath(dir string) string { return filepath.Join(dir, ManifestName) }

// readManifest returns the newest segment's first index the manifest
// records; ok is false when there is no manifest.
func readManifest(dir string) (newest uint64, ok bool, err error) {
	b, err := os.ReadFile(manifestPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("wal: %w", err)
	}
	why := ""
	switch {
	case len(b) != manifestSize:
		why = fmt.Sprintf("%d bytes, want %d", len(b), manifestSize)
	case string(b[:8]) != manifestMagic:
		why = "bad magic"
	case crc32.Checksum(b[:20], castagnoli) != le.Uint32(b[20:24]):
		why = "checksum mismatch"
	case le.Uint32(b[8:12]) != manifestVersion:
		return 0, false, &VersionError{File: manifestPath(dir), Format: "log manifest", Found: le.Uint32(b[8:12]), Want: manifestVersion}
	case le.Uint64(b[12:20]) == 0:
		why = "records segment index 0"
	}
	if why != "" {
		return 0, false, &CorruptError{File: manifestPath(dir), Reason: "the log's manifest is damaged: " + why}
	}
	return le.Uint64(b[12:20]), true, nil
}

// writeManifest records newest as the newest segment, atomically. It does
// not fsync the directory: the caller does, once for the segment and the
// manifest.
func writeManifest(dir string, newest uint64, sync bool) error {
	var b [manifestSize]byte
	copy(b[:8], manifestMagic)
	le.PutUint32(b[8:12], manifestVersion)
	le.PutUint64(b[12:20], newest)
	le.PutUint32(b[20:24], crc32.Checksum(b[:20], castagnoli))
	final := manifestPath(dir)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b[:])
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// checkManifest compares the manifest with the segments found: every
// segment up to the one it names must still be there.
func checkManifest(dir string, segs []segment) (manifestOK bool, err error) {
	newest, ok, err := readManifest(dir)
	if err != nil {
		return false, err
	}
	if !ok {
		if len(segs) > 1 || len(segs) == 1 && segs[0].size > headerSize {
			return false, &VersionError{File: manifestPath(dir), Format: "log manifest", Found: 0, Want: manifestVersion}
		}
		return false, nil
	}
	if len(segs) == 0 {
		return false, &CorruptError{File: segmentPath(dir, newest), Missing: true, Reason: fmt.Sprintf(
			"no log segment is left, but %s says %s was created: every acknowledged record from the "+
				"deleted segments on is missing (restore the files from a backup, or run `tally repair` to "+
				"accept losing them)", ManifestName, segmentName(newest))}
	}
	have := segs[len(segs)-1].first
	if have < newest {
		return false, &CorruptError{File: segmentPath(dir, newest), Missing: true, Reason: fmt.Sprintf(
			"the newest log segment present is %s, but %s says %s was created: the segments after %s, "+
				"with every acknowledged record from index %d on, are missing (restore them from a backup, "+
				"or run `tally repair` to accept losing them)",
			segmentName(have), ManifestName, segmentName(newest), segmentName(have), newest)}
	}
	return have == newest, nil
}

// RemoveManifest deletes the manifest of dir, for a caller that deleted
// every segment on purpose (`tally repair` restarting a log that ended
// before its snapshot): the next Open starts a fresh log and manifest.
func RemoveManifest(dir string) error {
	if err := os.Remove(manifestPath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wal: %w", err)
	}
	return syncDir(dir)
}
