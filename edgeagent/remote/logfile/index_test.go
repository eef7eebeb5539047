package logfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFilesOldestFirst(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.log")
	for _, f := range []string{"c.log", "c.log.1", "c.log.2", "c.log.10", "c.log.previous", "c.log.previous.1", "c.log.1.tmp"} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	rel := func(fs []string) string {
		for i := range fs {
			fs[i] = filepath.Base(fs[i])
		}
		return strings.Join(fs, " ")
	}
	if got := rel(Files(p, false)); got != "c.log.10 c.log.2 c.log.1 c.log" {
		t.Errorf("current run: %s", got)
	}
	if got := rel(Files(p, true)); got != "c.log.previous.1 c.log.previous" {
		t.Errorf("previous run: %s", got)
	}
}

// TestIndexFollowsRenameRotation: the log writer renames PATH to PATH.1
// (and PATH.1 to PATH.2): the samples go with the files, and a new run
// still moves them all to PATH.previous….
func TestIndexFollowsRenameRotation(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.log")
	t0 := time.Unix(1000, 0)
	x := NewIndex()
	write := func(f, s string) { os.WriteFile(f, []byte(s), 0o644) }
	at := func(f string, off int64) time.Time {
		tm, ok := x.TimeAt(f, off)
		if !ok {
			return time.Time{}
		}
		return tm
	}

	write(p, "first\n")
	x.Sample(p, t0)
	os.Rename(p, p+".1")
	write(p, "second\n")
	x.Sample(p, t0.Add(time.Second))
	os.Rename(p+".1", p+".2")
	os.Rename(p, p+".1")
	write(p, "third\n")
	x.Sample(p, t0.Add(2*time.Second))
	for f, want := range map[string]time.Time{p + ".2": t0, p + ".1": t0.Add(time.Second), p: t0.Add(2 * time.Second)} {
		if got := at(f, 0); !got.Equal(want) {
			t.Errorf("%s dated %v, want %v", filepath.Base(f), got, want)
		}
	}

	// A new run: the runtime moves every file aside.
	os.Rename(p, p+".previous")
	os.Rename(p+".1", p+".previous.1")
	os.Rename(p+".2", p+".previous.2")
	write(p, "new run\n")
	x.Sample(p, t0.Add(3*time.Second))
	for f, want := range map[string]time.Time{p + ".previous.2": t0, p + ".previous.1": t0.Add(time.Second), p + ".previous": t0.Add(2 * time.Second), p: t0.Add(3 * time.Second)} {
		if got := at(f, 0); !got.Equal(want) {
			t.Errorf("%s dated %v, want %v", filepath.Base(f), got, want)
		}
	}
	if _, ok := x.TimeAt(p+".1", 0); ok {
		t.Error("c.log.1 still indexed after the new run moved it")
	}
	x.Sweep([]string{p}, t0.Add(4*time.Second))
	if x.Len() != 4 {
		t.Errorf("%d files indexed after a sweep, want 4", x.Len())
	}
	x.Sweep(nil, t0.Add(5*time.Second))
	if x.Len() != 0 {
		t.Errorf("%d files indexed for no live container", x.Len())
	}
}

// TestIndexForgetsRotatedAway: files the writer's rotation removed do not
// stay in the index.
func TestIndexForgetsRotatedAway(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.log")
	x := NewIndex()
	for i := 0; i < 50; i++ {
		os.Remove(p + ".1")
		os.Rename(p, p+".1") // MaxFiles 1
		os.WriteFile(p, []byte("line\n"), 0o644)
		x.Sample(p, time.Unix(int64(i), 0))
	}
	if x.Len() != 2 {
		t.Errorf("%d files indexed, want 2 (c.log, c.log.1)", x.Len())
	}
}
