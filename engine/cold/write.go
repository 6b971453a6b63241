package cold

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tally-dev/tally/engine/sealed"
)

// tmpMarker is in the name of every file Create has not finished; no
// other file in a cold directory has it, so CleanTemp may delete them.
const tmpMarker = ".coldtmp-"

// Create writes a file at path with the bytes write produces, so that path
// holds either its old contents or the complete new ones, whatever happens
// (kill -9, power loss): the bytes go to a temporary file in the same
// directory, which is fsynced, renamed over path, and the directory
// fsynced. A crash leaves at most a temporary file, which CleanTemp
// removes.
func Create(path string, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, base+tmpMarker+"*")
	if err != nil {
		return fmt.Errorf("cold: create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 256<<10)
	if err := write(bw); err != nil {
		return fmt.Errorf("cold: write %s: %w", tmp.Name(), err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("cold: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("cold: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cold: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cold: rename %s: %w", tmp.Name(), err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cold: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cold: fsync directory %s: %w", dir, err)
	}
	return nil
}

// CreateWindow streams a window into a new file at path: fill adds posts
// in increasing id order to the Writer, which CreateWindow closes. Memory
// stays at one block, so a compaction can write a window larger than
// memory.
func CreateWindow(path string, opts sealed.Options, fill func(*sealed.Writer) error) error {
	return Create(path, func(out io.Writer) error {
		w := sealed.NewWriter(out, opts)
		if err := fill(w); err != nil {
			return err
		}
		return w.Close()
	})
}

// CleanTemp removes the temporary files that writes interrupted by a crash
// left in dir, and reports how many it removed.
func CleanTemp(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.Contains(e.Name(), tmpMarker) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}
