// Package logfile reads the container log files the shim writes
// (state.LogPath: raw stdout and stderr, no per-line times) for remote
// logs and crash reports: the files of a run, tails read backwards, and
// an in-memory index that dates byte offsets.
//
// A container's log is PATH (the current run) and PATH.1 … PATH.N (what
// rotation moved out of it: by rename, newest first, when the log writer
// writes it; PATH.1 alone by copy-truncate when the shim does); when the
// task starts again the runtime moves them to PATH.previous and
// PATH.previous.1 … .N.
package logfile

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MaxSamples bounds the samples the Index keeps per file.
const MaxSamples = 256

// Index dates the bytes of log files, which carry no times of their own.
// The agent samples each live log file's size every few seconds (and
// when a request reads it); a byte is dated by the first sample that saw
// it, so a time is an upper bound, late by at most one sampling interval
// (bytes written before the agent first saw the file get the time of
// that first sample, or the file's modification time when it was never
// sampled). Rotation is followed: when a file shrinks (copy-truncate) its
// samples move to PATH.1; when it is replaced by a new file and now is
// PATH.1 (rotation by rename) those of PATH.K move to PATH.K+1; when it
// is replaced otherwise (a new run) they move to PATH.previous (and
// PATH.K's to PATH.previous.K). Each file keeps at
// most MaxSamples samples: when full, every other sample of the older
// half is dropped, which makes the older times coarser but never
// earlier than the truth.
type Index struct {
	mu    sync.Mutex
	files map[string]*fileIndex
}

type fileIndex struct {
	ino     uint64
	samples []sample // sizes strictly increasing
}

type sample struct {
	size int64
	at   time.Time
}

// NewIndex returns an empty Index.
func NewIndex() *Index { return &Index{files: map[string]*fileIndex{}} }

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// Sample records path's size at now.
func (x *Index) Sample(path string, now time.Time) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	ino, size := inode(fi), fi.Size()
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.files[path]
	switch {
	case f == nil:
		f = &fileIndex{ino: ino}
		x.files[path] = f
	case f.ino != ino:
		if one, err := os.Stat(path + ".1"); err == nil && inode(one) == f.ino {
			// Rotated by rename: PATH.K is now PATH.K+1.
			x.move(path, path, 1)
		} else {
			// Replaced: a new run; the old files are now PATH.previous….
			x.move(path, path+".previous", 0)
		}
		f = &fileIndex{ino: ino}
		x.files[path] = f
	case len(f.samples) > 0 && size < f.samples[len(f.samples)-1].size:
		// Copy-truncate: what was here is in PATH.1 at the same offsets.
		x.files[path+".1"] = f
		f = &fileIndex{ino: ino}
		x.files[path] = f
	}
	if n := len(f.samples); n > 0 && f.samples[n-1].size >= size {
		return
	}
	if size == 0 {
		return
	}
	if len(f.samples) >= MaxSamples {
		half := len(f.samples) / 2
		kept := f.samples[:0]
		for i, s := range f.samples {
			if i >= half || i%2 == 1 {
				kept = append(kept, s)
			}
		}
		f.samples = kept
	}
	f.samples = append(f.samples, sample{size, now})
}

// move re-keys the samples of PATH and PATH.K to TO.K+by (TO for K=0,
// PATH itself), dropping what was under TO's names before.
func (x *Index) move(path, to string, by int) {
	name := func(base string, k int) string {
		if k == 0 {
			return base
		}
		return base + "." + strconv.Itoa(k)
	}
	old := map[int]*fileIndex{}
	for p, f := range x.files {
		if k, ok := rotatedNumber(path, p); ok {
			old[k] = f
			delete(x.files, p)
		}
		if k, ok := rotatedNumber(to, p); ok && to != path {
			delete(x.files, name(to, k))
		}
	}
	for k, f := range old {
		n := name(to, k+by)
		if _, err := os.Stat(n); err == nil || k == 0 {
			x.files[n] = f // not the files rotation removed
		}
	}
}

// rotatedNumber reports whether p is base (0) or base.K, and K.
func rotatedNumber(base, p string) (int, bool) {
	if p == base {
		return 0, true
	}
	rest, ok := strings.CutPrefix(p, base+".")
	if !ok || rest == "" || rest[0] == '0' {
		return 0, false
	}
	k, err := strconv.Atoi(rest)
	return k, err == nil && k > 0
}

// Sweep samples every path of live (the current log files of the
// containers) and forgets the files of containers no longer listed.
func (x *Index) Sweep(live []string, now time.Time) {
	for _, p := range live {
		x.Sample(p, now)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	keep := make(map[string]bool, len(live))
	for _, p := range live {
		keep[p] = true
	}
	for p := range x.files {
		base := p
		if i := strings.LastIndexByte(p, '.'); i > 0 {
			if _, ok := rotatedNumber(p[:i], p); ok {
				base = p[:i]
			}
		}
		base = strings.TrimSuffix(base, ".previous")
		if !keep[base] {
			delete(x.files, p)
		}
	}
}

// TimeAt returns the time of the byte at off in path: that of the first
// sample that saw it. ok is false when no sample did.
func (x *Index) TimeAt(path string, off int64) (time.Time, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.files[path]
	if f == nil {
		return time.Time{}, false
	}
	for _, s := range f.samples { // at most MaxSamples
		if s.size > off {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// OffsetSince returns an offset in path before which every byte is dated
// before t (0 when unknown): the size at the last sample before t.
func (x *Index) OffsetSince(path string, t time.Time) int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.files[path]
	if f == nil {
		return 0
	}
	var off int64
	for _, s := range f.samples {
		if !s.at.Before(t) {
			break
		}
		off = s.size
	}
	return off
}

// Len returns the number of files indexed (for tests).
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.files)
}
