//go:build !unix

package state

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// writeFilesAtomic: see atomic_unix.go.
func writeFilesAtomic(dir string, files []fileWrite) (err error) {
	tmps := make([]string, len(files))
	defer func() {
		for _, tmp := range tmps {
			if tmp != "" {
				_ = os.Remove(tmp)
			}
		}
	}()
	for i, f := range files {
		tmp, err := writeTemp(filepath.Join(dir, f.name), f.data, f.perm)
		if err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f.name), err)
		}
		tmps[i] = tmp
	}
	for i, f := range files {
		if err := os.Rename(tmps[i], filepath.Join(dir, f.name)); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f.name), err)
		}
		tmps[i] = ""
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("write %s: fsync directory: %w", filepath.Join(dir, files[len(files)-1].name), err)
	}
	return nil
}

// writeTemp writes data into a new file next to path, fsyncs and closes
// it, and returns its name.
func writeTemp(path string, data []byte, perm fs.FileMode) (name string, err error) {
	var f *os.File
	for range 100 {
		name = path + ".tmp-" + strconv.FormatUint(uint64(rand.Uint32()), 10)
		name = filepath.Join(filepath.Dir(name), "."+filepath.Base(name))
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(name)
			name = ""
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return name, err
	}
	if _, err := f.Write(data); err != nil {
		return name, err
	}
	return name, f.Sync()
}
