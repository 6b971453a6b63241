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
	var hdr [bitpack.HeaderBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return bitpack.ReadErr(ErrCorrupt, "tier", "snapshot header", err)
	}
	f, err := bitpack.ParseHeader(hdr[:], snapMagic, "tier snapshot", snapVersion, ErrCorrupt)
	if err != nil {
		return err
	}
	whole := io.MultiReader(bytes.NewReader(hdr[:]), r)
	millis := int64(f[1])
	if millis == t.opts.WindowMillis {
		return t.Load(whole)
	}
	if millis < 1 || millis > 1<<34 {
		return fmt.Errorf("%w: snapshot has windows of %d ms", ErrCorrupt, millis)
	}
	if len(t.wins) > 0 {
		return fmt.Errorf("tier: an image of %d ms windows loads only into an empty tier of %d ms windows", millis, t.opts.WindowMillis)
	}
	opts := t.opts
	opts.WindowMillis, opts.MemoryBudget, opts.ColdAge = millis, 0, 0
	other, err := New[R](t.codec, opts)
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
