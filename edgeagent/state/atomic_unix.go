//go:build unix

package state

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// writeFilesAtomic replaces each file of dir as WriteFileAtomic does, with
// one fsync of the directory for all of them: every file is written and
// fsynced under a temporary name first, then each is renamed over its
// name in order, then the directory is fsynced. After a crash each file
// holds its old or its new content (a file renamed before the crash may
// be new while a later one is old: the same as after a crash between two
// WriteFileAtomic calls). Nothing is renamed when a write fails; a failed
// rename leaves the files before it replaced.
//
// The files are created and renamed relative to the directory's
// descriptor, which the final fsync needs anyway, and through bare
// descriptors: an os.File would also probe its blocking mode and register
// a cleanup, for a file that lives a few microseconds. For one file:
// openat (the directory), openat, write, fsync, close, renameat, fsync,
// close; each more file adds five.
func writeFilesAtomic(dir string, files []fileWrite) (err error) {
	dfd, err := open(dir, unix.AT_FDCWD, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, files[0].name), err)
	}
	defer unix.Close(dfd)
	tmps := make([]string, len(files))
	defer func() {
		for _, tmp := range tmps {
			if tmp != "" {
				_ = unix.Unlinkat(dfd, tmp, 0)
			}
		}
	}()
	for i, f := range files {
		tmp, err := writeTemp(dfd, f)
		if err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f.name), err)
		}
		tmps[i] = tmp
	}
	for i, f := range files {
		if err := ignoringEINTR(func() error { return unix.Renameat(dfd, tmps[i], dfd, f.name) }); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f.name), &fs.PathError{Op: "rename", Path: tmps[i], Err: err})
		}
		tmps[i] = ""
	}
	if err := ignoringEINTR(func() error { return unix.Fsync(dfd) }); err != nil {
		return fmt.Errorf("write %s: fsync directory: %w", filepath.Join(dir, files[len(files)-1].name), &fs.PathError{Op: "fsync", Path: dir, Err: err})
	}
	return nil
}

// writeTemp writes f into a new file of the directory dfd (mode f.perm,
// whatever the umask leaves), named after it with a random suffix, and
// fsyncs and closes it. It returns the file's name.
func writeTemp(dfd int, f fileWrite) (name string, err error) {
	prefix := "." + f.name + ".tmp-"
	fd := -1
	for range 100 {
		name = prefix + strconv.FormatUint(uint64(rand.Uint32()), 10)
		fd, err = open(name, dfd, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, uint32(f.perm.Perm()))
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := unix.Close(fd); err == nil && cerr != nil {
			err = &fs.PathError{Op: "close", Path: name, Err: cerr}
		}
		if err != nil {
			_ = unix.Unlinkat(dfd, name, 0)
			name = ""
		}
	}()
	// Only the umask can have taken bits off: it leaves an owner's read
	// and write alone, so 0600, the agent's mode, needs no chmod.
	if f.perm.Perm() != 0o600 {
		if err := ignoringEINTR(func() error { return unix.Fchmod(fd, uint32(f.perm.Perm())) }); err != nil {
			return name, &fs.PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	for data := f.data; len(data) > 0; {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Write(fd, data)
			return err
		})
		if err == nil && n == 0 {
			err = unix.EIO
		}
		if err != nil {
			return name, &fs.PathError{Op: "write", Path: name, Err: err}
		}
		data = data[n:]
	}
	if err := ignoringEINTR(func() error { return unix.Fsync(fd) }); err != nil {
		return name, &fs.PathError{Op: "fsync", Path: name, Err: err}
	}
	return name, nil
}

// open opens name relative to the directory dfd (or AT_FDCWD).
func open(name string, dfd, flags int, perm uint32) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dfd, name, flags, perm)
		return err
	})
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return fd, nil
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}
