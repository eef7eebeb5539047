package logwriter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for Options.
const (
	DefaultMaxFiles = 1
	// reopenEvery is how often a Writer whose file could not be opened
	// tries again; what arrives in between is dropped.
	reopenEvery = time.Second
)

// Options say where a log goes and how large it may grow.
type Options struct {
	// Path is the live log file. Required, absolute.
	Path string
	// MaxBytes caps every file of the log: a write that would take the
	// live file past it is cut at the last line end that fits, the file
	// is rotated, and the rest goes to a new file. 0 or less: no cap.
	MaxBytes int64
	// MaxFiles is how many rotated files are kept besides the live one:
	// PATH.1 (the newest) to PATH.N. Default DefaultMaxFiles.
	MaxFiles int
}

func (o *Options) ensureDefaults() {
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
}

// Bound is the most bytes the log's files hold at any moment:
// MaxBytes × (MaxFiles + 1); 0 when there is no cap.
func (o Options) Bound() int64 {
	o.ensureDefaults()
	if o.MaxBytes <= 0 {
		return 0
	}
	return o.MaxBytes * int64(o.MaxFiles+1)
}

// Encode returns o as the one argument of "fleet-agent log-writer": a URL
// query. It is one argument because the shim passes a binary:// URI's
// query keys as arguments in no set order.
func (o Options) Encode() string {
	return url.Values{
		"path":      {o.Path},
		"max-size":  {strconv.FormatInt(o.MaxBytes, 10)},
		"max-files": {strconv.Itoa(o.MaxFiles)},
	}.Encode()
}

// Decode parses what Encode returns.
func Decode(s string) (Options, error) {
	var o Options
	q, err := url.ParseQuery(s)
	if err != nil {
		return o, fmt.Errorf("log writer options: %w", err)
	}
	for k, v := range q {
		switch k {
		case "path":
			o.Path = v[0]
		case "max-size":
			if o.MaxBytes, err = strconv.ParseInt(v[0], 10, 64); err != nil {
				return o, fmt.Errorf("log writer options: max-size: %w", err)
			}
		case "max-files":
			if o.MaxFiles, err = strconv.Atoi(v[0]); err != nil {
				return o, fmt.Errorf("log writer options: max-files: %w", err)
			}
		default:
			return o, fmt.Errorf("log writer options: unknown key %q", k)
		}
	}
	return o, o.check()
}

func (o Options) check() error {
	if !filepath.IsAbs(o.Path) {
		return fmt.Errorf("log writer options: path %q is not absolute", o.Path)
	}
	if o.MaxFiles < 0 {
		return fmt.Errorf("log writer options: max-files %d is negative", o.MaxFiles)
	}
	return nil
}

// Writer appends to a log file and rotates it by size as it writes:
// PATH.N-1 … PATH.1 move up one (PATH.N drops out), PATH becomes PATH.1
// and a new PATH starts, all by rename, so no byte is copied and the
// files never hold more than Options.Bound. It is the only writer of its
// files. Safe for concurrent use: each Write lands whole between two
// others, never inside one.
type Writer struct {
	mu       sync.Mutex
	o        Options
	f        *os.File
	size     int64
	failedAt time.Time // last failed open; zero when f is open or never tried
	openErr  error     // why the last open failed
	dropped  int64
	now      func() time.Time
}

// Open opens (or creates) the live file, keeping what it holds, and
// removes rotated files beyond MaxFiles left by a larger setting.
func Open(o Options) (*Writer, error) {
	o.ensureDefaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	w := newWriter(o)
	if w.f == nil {
		return nil, w.openErr
	}
	return w, nil
}

// newWriter is Open for checked options: a file that cannot be opened
// is tried again on a later Write.
func newWriter(o Options) *Writer {
	w := &Writer{o: o, now: time.Now}
	removeBeyond(o.Path, o.MaxFiles)
	_ = w.open() // failure recorded in failedAt and openErr
	return w
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.o.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		w.failedAt, w.openErr = w.now(), fmt.Errorf("open log: %w", err)
		return w.openErr
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		w.failedAt, w.openErr = w.now(), fmt.Errorf("open log: %w", err)
		return w.openErr
	}
	w.f, w.size, w.failedAt, w.openErr = f, fi.Size(), time.Time{}, nil
	return nil
}

// Write appends p, rotating first where it would pass the cap. It never
// fails: a log must not stop the program it records. Bytes that could not
// be written (a full disk, a file that cannot be opened) are counted in
// Dropped, and the file is opened again at most once a second.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		if w.f == nil && (w.failedAt.IsZero() || w.now().Sub(w.failedAt) >= reopenEvery) {
			_ = w.open() // failure recorded in failedAt
		}
		if w.f == nil {
			w.dropped += int64(len(p))
			break
		}
		chunk := p
		if limit := w.o.MaxBytes; limit > 0 && w.size+int64(len(p)) > limit {
			room := limit - w.size
			cut := 0
			if room > 0 {
				cut = bytes.LastIndexByte(p[:room], '\n') + 1
			}
			if cut == 0 && w.size == 0 {
				cut = int(min(int64(len(p)), limit)) // a line longer than the cap
			}
			if cut == 0 {
				w.rotate()
				continue
			}
			chunk = p[:cut]
		}
		m, err := w.f.Write(chunk)
		w.size += int64(m)
		p = p[m:]
		if err != nil {
			w.dropped += int64(len(p))
			break
		}
	}
	return n, nil
}

// rotate shifts the files up by one and starts an empty live file. When
// the live file cannot be renamed it is started over instead: the cap
// holds either way.
func (w *Writer) rotate() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	p := w.o.Path
	for k := w.o.MaxFiles - 1; k >= 1; k-- {
		err := os.Rename(p+"."+strconv.Itoa(k), p+"."+strconv.Itoa(k+1))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err := os.Rename(p, p+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o640)
		if err != nil {
			w.failedAt = w.now()
			return
		}
		w.f, w.size = f, 0
		return
	}
	_ = w.open() // failure recorded in failedAt
}

// Dropped is the number of bytes that could not be written.
func (w *Writer) Dropped() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Close closes the live file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// Files returns the rotated files of the log at path that exist, oldest
// first (PATH.N … PATH.1), with their numbers.
func Files(path string) []string {
	nums := rotatedNumbers(path)
	out := make([]string, 0, len(nums))
	for i := len(nums) - 1; i >= 0; i-- {
		out = append(out, path+"."+strconv.Itoa(nums[i]))
	}
	return out
}

// rotatedNumbers lists the N of every PATH.N, ascending.
func rotatedNumbers(path string) []int {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil
	}
	base := filepath.Base(path) + "."
	var nums []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base)
		if !ok || rest == "" || rest[0] == '0' {
			continue
		}
		if k, err := strconv.Atoi(rest); err == nil && k > 0 {
			nums = append(nums, k)
		}
	}
	slices.Sort(nums)
	return nums
}

// removeBeyond removes PATH.K for every K over n.
func removeBeyond(path string, n int) {
	for _, k := range rotatedNumbers(path) {
		if k > n {
			os.Remove(path + "." + strconv.Itoa(k))
		}
	}
}
