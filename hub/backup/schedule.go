package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names of scheduled backups: FilePrefix, the UTC time, the
// revision, FileSuffix. Sorted by name they are sorted by time.
const (
	FilePrefix = "fleet-backup-"
	FileSuffix = ".age"
)

// Clock is the scheduler's clock (tests inject one).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Result is what one scheduled backup did.
type Result struct {
	// Path is the backup written ("" on failure).
	Path string
	// Manifest is its manifest.
	Manifest Manifest
	// Size is the file's size in bytes.
	Size int64
	// Duration is how long it took.
	Duration time.Duration
	// Pruned are the old backups removed after it.
	Pruned []string
	// Err is why it failed (nil: it did not).
	Err error
}

// SchedulerOptions configure a Scheduler. Dir, Every, Key and Source are
// required.
type SchedulerOptions struct {
	// Dir is where backups are written (created 0700 if missing).
	Dir string
	// Every is the interval between backups (the RPO).
	Every time.Duration
	// Keep is how many backups are kept, the newest; default 48.
	Keep int
	// Key encrypts them.
	Key Key
	// Source is what is backed up.
	Source Source
	// Clock defaults to the real one.
	Clock Clock
	// Logger defaults to discard.
	Logger *slog.Logger
	// OnResult, if set, is called after each backup (metrics, events).
	OnResult func(Result)
}

// Scheduler writes a backup every Every into Dir, atomically (a
// temporary file, fsync, rename, fsync of the directory), and prunes the
// oldest beyond Keep.
type Scheduler struct{ o SchedulerOptions }

// NewScheduler checks o and returns a Scheduler.
func NewScheduler(o SchedulerOptions) (*Scheduler, error) {
	if o.Dir == "" {
		return nil, errors.New("--backup-dir: required for scheduled backups")
	}
	if o.Every <= 0 {
		return nil, fmt.Errorf("--backup-every %s: must be positive", o.Every)
	}
	if o.Keep == 0 {
		o.Keep = 48
	}
	if o.Keep < 1 {
		return nil, fmt.Errorf("--backup-keep %d: keep at least one", o.Keep)
	}
	if _, err := o.Key.recipients(); err != nil {
		return nil, fmt.Errorf("scheduled backups: %w", err)
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Source.Now == nil {
		o.Source.Now = o.Clock.Now
	}
	if o.Source.TempDir == "" {
		o.Source.TempDir = o.Dir // the disk the backups go to
	}
	return &Scheduler{o: o}, nil
}

// Run takes a backup every Every until ctx is done.
func (s *Scheduler) Run(ctx context.Context) error {
	s.o.Logger.Info("scheduled backups", "dir", s.o.Dir, "every", s.o.Every, "keep", s.o.Keep)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.o.Clock.After(s.o.Every):
		}
		s.Once(ctx)
	}
}

// Once takes one backup now, prunes, reports and returns the result.
func (s *Scheduler) Once(ctx context.Context) Result {
	start := s.o.Clock.Now()
	res := s.write(ctx)
	res.Duration = s.o.Clock.Now().Sub(start)
	if res.Err == nil {
		res.Pruned, res.Err = s.prune()
	}
	if res.Err != nil {
		s.o.Logger.Error("scheduled backup failed", "dir", s.o.Dir, "err", res.Err)
	} else {
		s.o.Logger.Info("backup written", "path", res.Path, "revision", res.Manifest.Revision,
			"bytes", res.Size, "duration", res.Duration, "pruned", len(res.Pruned))
	}
	if s.o.OnResult != nil {
		s.o.OnResult(res)
	}
	return res
}

func (s *Scheduler) write(ctx context.Context) (res Result) {
	if err := os.MkdirAll(s.o.Dir, 0o700); err != nil {
		res.Err = fmt.Errorf("backup dir: %w", err)
		return res
	}
	f, err := os.CreateTemp(s.o.Dir, "."+FilePrefix+"*.tmp")
	if err != nil {
		res.Err = fmt.Errorf("backup: %w", err)
		return res
	}
	defer func() {
		if res.Err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		res.Err = fmt.Errorf("backup: %w", err)
		return res
	}
	m, err := Write(ctx, f, s.o.Source, s.o.Key)
	if err != nil {
		res.Err = err
		return res
	}
	res.Manifest = m
	if err := f.Sync(); err != nil {
		res.Err = fmt.Errorf("backup: sync: %w", err)
		return res
	}
	st, err := f.Stat()
	if err != nil {
		res.Err = fmt.Errorf("backup: %w", err)
		return res
	}
	res.Size = st.Size()
	if err := f.Close(); err != nil {
		res.Err = fmt.Errorf("backup: %w", err)
		return res
	}
	name := fmt.Sprintf("%s%s-rev%d%s", FilePrefix, m.Created.UTC().Format("20060102T150405.000Z"), m.Revision, FileSuffix)
	path := filepath.Join(s.o.Dir, name)
	if err := os.Rename(f.Name(), path); err != nil {
		res.Err = fmt.Errorf("backup: %w", err)
		return res
	}
	if err := syncPath(s.o.Dir); err != nil {
		res.Err = err
		return res
	}
	res.Path = path
	return res
}

// prune removes the oldest backups beyond Keep.
func (s *Scheduler) prune() ([]string, error) {
	names, err := List(s.o.Dir)
	if err != nil {
		return nil, err
	}
	var pruned []string
	for len(names) > s.o.Keep {
		path := filepath.Join(s.o.Dir, names[0])
		if err := os.Remove(path); err != nil {
			return pruned, fmt.Errorf("prune old backup: %w", err)
		}
		pruned = append(pruned, path)
		names = names[1:]
	}
	return pruned, nil
}

// List returns the scheduled backups in dir, oldest first.
func List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && strings.HasPrefix(n, FilePrefix) && strings.HasSuffix(n, FileSuffix) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}
