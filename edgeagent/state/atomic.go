package state

import (
	"io/fs"
	"path/filepath"
)

// WriteFileAtomic replaces path with data: it writes a temporary file in
// the same directory, fsyncs it, renames it over path and fsyncs the
// directory, so that after a crash path holds either the old or the new
// content.
//
// The agent writes its state on every change, so this is the agent's
// busiest path to the disk: on Unix it takes eight system calls and no
// more (os.CreateTemp, os.NewFile and os.Rename add a non-blocking-mode
// probe, a try at the network poller and an lstat of the target), and
// names the files relative to their directory.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return writeFilesAtomic(filepath.Dir(path), []fileWrite{{name: filepath.Base(path), data: data, perm: perm}})
}

// fileWrite is one file of writeFilesAtomic.
type fileWrite struct {
	name string // in the directory
	data []byte
	perm fs.FileMode
}
