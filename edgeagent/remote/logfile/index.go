// Package logfile reads the container log files the shim writes
// (state.LogPath: raw stdout and stderr, no per-line times) for remote
// logs and crash reports: the files of a run, tails read backwards, and
// an in-memory index that dates byte offsets.
//
// A container's log is PATH (the current run) and PATH.1 (what
// copy-truncate rotation moved out of it); when the task starts again
// the runtime moves both to PATH.previous and PATH.previous.1.
package logfile

import (
	"os"
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
// samples move to PATH.1, when it is replaced (a new run) to
// PATH.previous (and PATH.1's to PATH.previous.1). Each file keeps at
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
		// Replaced: a new run; the old file is now PATH.previous.
		x.files[path+".previous"] = f
		if one := x.files[path+".1"]; one != nil {
			x.files[path+".previous.1"] = one
			delete(x.files, path+".1")
		} else {
			delete(x.files, path+".previous.1")
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

// Sweep samples every path of live (the current log files of the
// containers) and forgets the files of containers no longer listed.
func (x *Index) Sweep(live []string, now time.Time) {
	for _, p := range live {
		x.Sample(p, now)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	keep := make(map[string]bool, 4*len(live))
	for _, p := range live {
		for _, q := range []string{p, p + ".1", p + ".previous", p + ".previous.1"} {
			keep[q] = true
		}
	}
	for p := range x.files {
		if !keep[p] {
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
