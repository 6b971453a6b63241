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
	return loadAnyWindow(r, t.opts, len(t.wins) == 0, t.Load,
		func(opts Options) (*Tier[R], error) { return New[R](t.codec, opts) },
		func(other *Tier[R]) (err, rangeErr error) {
			err = t.Import(func(yield func(uint64, R) bool) { rangeErr = other.Range(yield) }, now)
			return err, rangeErr
		})
}

// LoadAnyWindow is Load for a set image of any window length, as
// Tier.LoadAnyWindow; an image of another length is rebuilt through
// LoadPairs into s, which must be empty.
func (s *Set) LoadAnyWindow(r io.Reader, now time.Time) error {
	return loadAnyWindow(r, s.opts, len(s.wins) == 0, s.Load,
		func(opts Options) (*Set, error) { return NewSet(string(s.tag[:]), opts) },
		func(other *Set) (err, rangeErr error) {
			err = s.LoadPairs(func(yield func(uint64, uint64) bool) { rangeErr = other.Range(yield) }, now)
			return err, rangeErr
		})
}

// imageTable is what loadAnyWindow needs of the table it loads an image
// of other windows into.
type imageTable interface {
	Load(io.Reader) error
	Close() error
}

// loadAnyWindow reads the image's header and hands the whole image to
// load when its windows are opts'; otherwise, the table being empty, it
// loads the image into a table of the image's windows (newOther, with
// options that move no window anywhere) and has fill copy its records.
func loadAnyWindow[T imageTable](r io.Reader, opts Options, empty bool, load func(io.Reader) error,
	newOther func(Options) (T, error), fill func(T) (err, rangeErr error)) error {
	millis, whole, err := imageWindow(r)
	switch {
	case err != nil:
		return err
	case millis == opts.WindowMillis:
		return load(whole)
	case !empty:
		return fmt.Errorf("tier: an image of %d ms windows loads only into an empty table of %d ms windows", millis, opts.WindowMillis)
	}
	opts.WindowMillis, opts.MemoryBudget, opts.ColdAge = millis, 0, 0
	other, err := newOther(opts)
	if err != nil {
		return err
	}
	defer other.Close()
	if err := other.Load(whole); err != nil {
		return err
	}
	return errors.Join(fill(other))
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
