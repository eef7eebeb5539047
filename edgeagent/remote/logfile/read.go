package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/fleetmq/fleet/edgeagent/logwriter"
)

// ErrLimit is returned by Read and Follower.Poll once LimitBytes bytes
// were written.
var ErrLimit = errors.New("log: limit reached")

// Files returns the files of a container's log for one run, oldest
// first, leaving out those that do not exist: PATH.N … PATH.1 and PATH
// for the current run, PATH.previous.N … PATH.previous for the previous
// one.
func Files(path string, previous bool) []string {
	if previous {
		path += ".previous"
	}
	out := logwriter.Files(path)
	if _, err := os.Stat(path); err == nil {
		out = append(out, path)
	}
	return out
}

// Options select what Read returns, as kubectl logs does.
type Options struct {
	// TailLines keeps only the last N lines (nil: all).
	TailLines *int64
	// Since keeps only lines dated at or after it (zero: all).
	Since time.Time
	// LimitBytes stops after this many bytes written, timestamps
	// included (0: no limit).
	LimitBytes int64
	// Timestamps prefixes each line with its date (RFC 3339 with
	// nanoseconds, then a space).
	Timestamps bool
	// Index dates the bytes (nil: every byte is dated by its file's
	// modification time).
	Index *Index
	// Now is the time of bytes read while following (default time.Now).
	Now func() time.Time
}

// Writer turns log bytes into output: it prefixes lines with their
// dates, drops lines dated before Since and stops at LimitBytes.
type Writer struct {
	o       Options
	emit    func([]byte) error
	written int64
	atStart bool // the next byte starts a line
	skip    bool // the current line is dropped (before Since)
}

// NewWriter returns a Writer that passes its output to emit.
func NewWriter(o Options, emit func([]byte) error) *Writer {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Writer{o: o, emit: emit, atStart: true}
}

// Written returns the bytes written so far.
func (w *Writer) Written() int64 { return w.written }

// write passes data on; date dates the line that ends at (or runs past)
// the given index of data.
func (w *Writer) write(data []byte, date func(i int) time.Time) error {
	for done := 0; done < len(data); {
		rest := data[done:]
		n := bytes.IndexByte(rest, '\n') + 1
		if n == 0 {
			n = len(rest)
		}
		piece := rest[:n]
		if w.atStart {
			t := date(done + n - 1)
			w.skip = !w.o.Since.IsZero() && t.Before(w.o.Since)
			if !w.skip && w.o.Timestamps {
				if err := w.out([]byte(t.UTC().Format(time.RFC3339Nano) + " ")); err != nil {
					return err
				}
			}
		}
		w.atStart = piece[len(piece)-1] == '\n'
		done += n
		if w.skip {
			continue
		}
		if err := w.out(piece); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) out(p []byte) error {
	if w.o.LimitBytes > 0 {
		room := w.o.LimitBytes - w.written
		if room <= 0 {
			return ErrLimit
		}
		if int64(len(p)) > room {
			p = p[:room]
		}
	}
	if err := w.emit(p); err != nil {
		return err
	}
	w.written += int64(len(p))
	if w.o.LimitBytes > 0 && w.written >= w.o.LimitBytes {
		return ErrLimit
	}
	return nil
}

// segment is one file as Read found it.
type segment struct {
	path  string
	f     *os.File
	size  int64
	mtime time.Time
}

// Position is where Read stopped: the end of the last file as it was
// when Read opened it, for a Follower to go on from.
type Position struct {
	Path   string
	File   *os.File // open; the Follower takes it over (nil: none)
	Offset int64
}

// Read writes the selected part of files (oldest first, as Files returns
// them) through w, up to the sizes they had when Read opened them. The
// last file stays open in the returned Position (the caller closes it,
// or hands it to NewFollower); on error it is closed.
func Read(files []string, w *Writer) (Position, error) {
	var segs []segment
	closeAll := func(keepLast bool) {
		for i, s := range segs {
			if keepLast && i == len(segs)-1 {
				continue
			}
			s.f.Close()
		}
	}
	for _, p := range files {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			closeAll(false)
			return Position{}, fmt.Errorf("open log: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			closeAll(false)
			return Position{}, fmt.Errorf("stat log: %w", err)
		}
		segs = append(segs, segment{path: p, f: f, size: fi.Size(), mtime: fi.ModTime()})
	}
	if len(segs) == 0 {
		return Position{}, nil
	}
	si, off, err := start(segs, w.o)
	if err != nil {
		closeAll(false)
		return Position{}, err
	}
	buf := make([]byte, 32<<10)
	for ; si < len(segs); si, off = si+1, 0 {
		s := segs[si]
		for off < s.size {
			n, err := s.f.ReadAt(buf[:min(int64(len(buf)), s.size-off)], off)
			if n > 0 {
				base := off
				werr := w.write(buf[:n], func(i int) time.Time { return dateAt(w.o.Index, s, base+int64(i)) })
				if werr != nil {
					closeAll(false)
					return Position{}, werr
				}
				off += int64(n)
			}
			if err == io.EOF {
				break // shrank under us (rotated): the Follower sees it
			}
			if err != nil {
				closeAll(false)
				return Position{}, fmt.Errorf("read log %s: %w", s.path, err)
			}
		}
	}
	closeAll(true)
	last := segs[len(segs)-1]
	return Position{Path: last.path, File: last.f, Offset: last.size}, nil
}

// dateAt dates the byte at off of s.
func dateAt(x *Index, s segment, off int64) time.Time {
	if x != nil {
		if t, ok := x.TimeAt(s.path, off); ok {
			return t
		}
	}
	return s.mtime
}

// start returns where reading begins: the later of the first line dated
// at or after Since and the first of the last TailLines lines.
func start(segs []segment, o Options) (int, int64, error) {
	si, off := 0, int64(0)
	if !o.Since.IsZero() {
		si = len(segs)
		for i, s := range segs {
			var o2 int64
			if o.Index != nil {
				o2 = o.Index.OffsetSince(s.path, o.Since)
			}
			if o2 == 0 && s.mtime.Before(o.Since) && (o.Index == nil || !hasDates(o.Index, s)) {
				continue // undated and older than Since as a whole
			}
			if o2 >= s.size {
				continue
			}
			ls, err := lineStart(s, o2)
			if err != nil {
				return 0, 0, err
			}
			si, off = i, ls
			break
		}
	}
	if o.TailLines != nil {
		ti, toff, err := tailStart(segs, *o.TailLines)
		if err != nil {
			return 0, 0, err
		}
		if ti > si || (ti == si && toff > off) {
			si, off = ti, toff
		}
	}
	return si, off, nil
}

func hasDates(x *Index, s segment) bool {
	_, ok := x.TimeAt(s.path, 0)
	return ok
}

// lineStart returns the offset of the start of the line holding off.
func lineStart(s segment, off int64) (int64, error) {
	buf := make([]byte, 4096)
	for end := off; end > 0; {
		n := min(int64(len(buf)), end)
		if _, err := s.f.ReadAt(buf[:n], end-n); err != nil {
			return 0, fmt.Errorf("read log %s: %w", s.path, err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return 0, nil
}

// tailStart finds the start of the last n lines, reading backwards. A
// last line without its newline counts as a line.
func tailStart(segs []segment, n int64) (int, int64, error) {
	if n == 0 {
		last := len(segs) - 1
		return last, segs[last].size, nil
	}
	buf := make([]byte, 32<<10)
	var seen int64
	first := true
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		for end := s.size; end > 0; {
			m := min(int64(len(buf)), end)
			if _, err := s.f.ReadAt(buf[:m], end-m); err != nil {
				return 0, 0, fmt.Errorf("read log %s: %w", s.path, err)
			}
			chunk := buf[:m]
			if first {
				first = false
				if chunk[len(chunk)-1] == '\n' {
					chunk = chunk[:len(chunk)-1] // the last line's own newline
				}
			}
			for j := len(chunk) - 1; j >= 0; j-- {
				if chunk[j] == '\n' {
					seen++
					if seen == n {
						return i, end - m + int64(j) + 1, nil
					}
				}
			}
			end -= m
		}
	}
	return 0, 0, nil
}

// Tail returns the end of the current run's log at path (PATH.N … PATH.1
// and PATH): at most lines lines and maxBytes bytes, cut at a line start
// when it can be. It is what a crash report carries.
func Tail(path string, lines int64, maxBytes int) (string, error) {
	var out []byte
	w := NewWriter(Options{TailLines: &lines}, func(p []byte) error {
		out = append(out, p...)
		if len(out) > 2*maxBytes {
			out = append(out[:0], out[len(out)-maxBytes:]...)
		}
		return nil
	})
	pos, err := Read(Files(path, false), w)
	if pos.File != nil {
		pos.File.Close()
	}
	if err != nil {
		return "", err
	}
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
		if i := bytes.IndexByte(out, '\n'); i >= 0 && i < len(out)-1 {
			out = out[i+1:]
		}
	}
	return string(out), nil
}
