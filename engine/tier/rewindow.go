package tier

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tally-dev/tally/engine/bitpack"
)

// LoadAnyWindow is Load for an image that may have been written with
// another window length (an operator changed it between runs: only the
// layout depends on it). An image of t's window length is loaded as Load
// does; another one is loaded into a tier of its own windows, in memory,
// and its records imported into t, which must be empty, with now
// telling old windows (built sealed) from open ones. Its cold files, if
// it names any, must be in t's Dir.
func (t *Tier[R]) LoadAnyWindow(r io.Reader, now time.Time) error {
	millis, whole, err := imageWindow(r)
	if err != nil {
		return err
	}
	if millis == t.opts.WindowMillis {
		return t.Load(whole)
	}
	if len(t.wins) > 0 {
		return fmt.Errorf("tier: an image of %d ms windows loads only into an empty table of %d ms windows", millis, t.opts.WindowMillis)
	}
	other, err := New[R](t.codec, otherWindows(t.opts, millis))
	if err != nil {
		return err
	}
	defer other.Close()
	if err := other.Load(whole); err != nil {
		return err
	}
	var rangeErr error
	err = t.Import(func(yield func(uint64, R) bool) {
		rangeErr = other.Range(yield)
	}, now)
	return errors.Join(err, rangeErr)
}

// LoadAnyWindow is Load for a set image of any window length, as
// Tier.LoadAnyWindow; an image of another length is rebuilt through
// LoadPairs into s, which must be empty.
func (s *Set) LoadAnyWindow(r io.Reader, now time.Time) error {
	millis, whole, err := imageWindow(r)
	if err != nil {
		return err
	}
	if millis == s.opts.WindowMillis {
		return s.Load(whole)
	}
	if len(s.wins) > 0 {
		return fmt.Errorf("tier: an image of %d ms windows loads only into an empty set of %d ms windows", millis, s.opts.WindowMillis)
	}
	other, err := NewSet(string(s.tag[:]), otherWindows(s.opts, millis))
	if err != nil {
		return err
	}
	defer other.Close()
	if err := other.Load(whole); err != nil {
		return err
	}
	var rangeErr error
	err = s.LoadPairs(func(yield func(uint64, uint64) bool) {
		rangeErr = other.Range(yield)
	}, now)
	return errors.Join(err, rangeErr)
}

// imageWindow reads the header of the image r holds and returns the
// window length it records, and a reader of the whole image.
func imageWindow(r io.Reader) (int64, io.Reader, error) {
	var hdr [bitpack.HeaderBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, bitpack.ReadErr(ErrCorrupt, "tier", "snapshot header", err)
	}
	f, err := bitpack.ParseHeader(hdr[:], snapMagic, "tier snapshot", snapVersion, ErrCorrupt)
	if err != nil {
		return 0, nil, err
	}
	millis := int64(f[1])
	if millis < 1 || millis > 1<<34 {
		return 0, nil, fmt.Errorf("%w: snapshot has windows of %d ms", ErrCorrupt, millis)
	}
	return millis, io.MultiReader(bytes.NewReader(hdr[:]), r), nil
}

// otherWindows is opts for a table of millis-long windows that only loads
// an image: no budget or age moves its windows anywhere.
func otherWindows(opts Options, millis int64) Options {
	opts.WindowMillis, opts.MemoryBudget, opts.ColdAge = millis, 0, 0
	return opts
}
