package logfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Follower reads what is appended to a live log file, as tail -F does:
// a file that shrank was rotated by copy-truncate (the bytes it had not
// read yet are read from PATH.1, then it goes on from 0), and a file that
// was replaced belongs to a new run of the container (the rest of the old
// one is read, then the new file from 0). Bytes are dated by when Poll
// read them.
type Follower struct {
	path string
	f    *os.File
	off  int64
	w    *Writer
	buf  []byte
}

// NewFollower follows the current log at path from pos (Read's result;
// a zero Position starts at the beginning of whatever file appears at
// path). It writes through w.
func NewFollower(path string, pos Position, w *Writer) *Follower {
	fl := &Follower{path: path, w: w, buf: make([]byte, 32<<10)}
	if pos.File != nil && pos.Path == path {
		fl.f, fl.off = pos.File, pos.Offset
	} else if pos.File != nil {
		// Read ended in PATH.1: the live file is read from its start.
		pos.File.Close()
	}
	return fl
}

// Close closes the file.
func (fl *Follower) Close() {
	if fl.f != nil {
		fl.f.Close()
		fl.f = nil
	}
}

// Poll writes what was appended since the last Poll.
func (fl *Follower) Poll() error {
	if fl.f == nil {
		f, err := os.Open(fl.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("open log: %w", err)
		}
		fl.f, fl.off = f, 0
	}
	cur, err := fl.f.Stat()
	if err != nil {
		return fmt.Errorf("stat log: %w", err)
	}
	if now, err := os.Stat(fl.path); err == nil && !os.SameFile(cur, now) {
		// A new run: finish the old file, then start on the new one.
		if err := fl.drain(fl.f, fl.off); err != nil {
			return err
		}
		fl.f.Close()
		fl.f = nil
		return fl.Poll()
	}
	if cur.Size() < fl.off {
		// Copy-truncate: the unread rest went to PATH.1.
		if one, err := os.Open(fl.path + ".1"); err == nil {
			fi, serr := one.Stat()
			if serr == nil && fi.Size() >= fl.off {
				err = fl.drain(one, fl.off)
			}
			one.Close()
			if err != nil {
				return err
			}
		}
		fl.off = 0
	}
	return fl.drain(fl.f, fl.off)
}

// drain writes f from off to its current end.
func (fl *Follower) drain(f *os.File, off int64) error {
	for {
		n, err := f.ReadAt(fl.buf, off)
		if n > 0 {
			now := fl.w.o.Now()
			if werr := fl.w.write(fl.buf[:n], func(int) time.Time { return now }); werr != nil {
				return werr
			}
			off += int64(n)
			if f == fl.f {
				fl.off = off
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read log %s: %w", fl.path, err)
		}
	}
}
