//go:build unix

package state

import (
	"io/fs"
	"os"
	"syscall"
)

// createExclusive creates name, which must not exist. The descriptor is
// opened directly and wrapped with os.NewFile: os.OpenFile would also put
// it in non-blocking mode and try the network poller, which refuses
// regular files, and undo both, five system calls for nothing.
func createExclusive(name string, perm fs.FileMode) (*os.File, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = syscall.Open(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, uint32(perm.Perm()))
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// syncDir fsyncs a directory, so that a rename in it is durable.
func syncDir(dir string) error {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	err = ignoringEINTR(func() error { return syscall.Fsync(fd) })
	if cerr := syscall.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != syscall.EINTR {
			return err
		}
	}
}
