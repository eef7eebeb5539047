package selfupdate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// DefaultDir is where install.sh puts the agent's binaries.
const DefaultDir = "/usr/local/lib/fleet-agent"

// ErrDigest says a binary's SHA-256 is not the signed digest.
var ErrDigest = errors.New("digest mismatch")

// ErrNoLayout says the running agent was not started from a Layout's
// current, so it cannot replace itself.
var ErrNoLayout = errors.New("not installed in an upgrade layout")

// Layout is the directory of the agent's binaries (see the package doc).
type Layout struct {
	Dir string
}

// The links of a Layout.
const (
	currentLink = "current"
	nextLink    = "next"
)

// Current is the path every start runs.
func (l Layout) Current() string { return filepath.Join(l.Dir, currentLink) }

// Next is the path of the binary in trial.
func (l Layout) Next() string { return filepath.Join(l.Dir, nextLink) }

// Binary is the path of a version's binary.
func (l Layout) Binary(version string) string { return filepath.Join(l.Dir, version) }

// CurrentVersion is the version current names.
func (l Layout) CurrentVersion() (string, error) { return l.link(currentLink) }

// NextVersion is the version next names ("" when there is no trial).
func (l Layout) NextVersion() (string, error) {
	v, err := l.link(nextLink)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return v, err
}

func (l Layout) link(name string) (string, error) {
	t, err := os.Readlink(filepath.Join(l.Dir, name))
	if err != nil {
		return "", fmt.Errorf("upgrade layout %s: %w", l.Dir, err)
	}
	return filepath.Base(t), nil
}

// Check says whether exe, the running binary, is what current names: only
// then can the agent replace itself.
func (l Layout) Check(exe string) error {
	cur, err := filepath.EvalSymlinks(l.Current())
	if err != nil {
		return fmt.Errorf("%w: %s: %w (install.sh makes it)", ErrNoLayout, l.Current(), err)
	}
	self, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoLayout, err)
	}
	if cur != self {
		return fmt.Errorf("%w: this agent runs %s, %s names %s", ErrNoLayout, self, l.Current(), cur)
	}
	return nil
}

// checkVersion refuses a version that is no release name (it is a file
// name here).
func checkVersion(v string) error {
	if _, err := schema.ParseAgentVersion(v); err != nil {
		return fmt.Errorf("agent version: %w", err)
	}
	return nil
}

// Stage copies the binary r gives into the layout as version, if its
// SHA-256 is digest ("sha256:…"): written beside, fsynced, made
// executable and renamed into place, so that a power cut leaves either no
// file or the whole one. It returns the bytes copied. A mismatch wraps
// ErrDigest and leaves nothing behind.
func (l Layout) Stage(version, digest string, r io.Reader) (int64, error) {
	if err := checkVersion(version); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(l.Dir, "."+version+".part-*")
	if err != nil {
		return 0, fmt.Errorf("stage %s: %w", version, err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("stage %s: %w", version, err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != digest {
		return n, fmt.Errorf("stage %s: %w: the binary's SHA-256 is %s, the signed desired state names %s", version, ErrDigest, got, digest)
	}
	if err := os.Rename(tmp.Name(), l.Binary(version)); err != nil {
		return n, fmt.Errorf("stage %s: %w", version, err)
	}
	return n, syncDir(l.Dir)
}

// Staged reports whether version's binary is in the layout with digest.
func (l Layout) Staged(version, digest string) bool {
	if checkVersion(version) != nil {
		return false
	}
	f, err := os.Open(l.Binary(version))
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return "sha256:"+hex.EncodeToString(h.Sum(nil)) == digest
}

// SetNext points next at version's binary (an atomic rename of a new
// link).
func (l Layout) SetNext(version string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	return l.relink(nextLink, version)
}

// SetCurrent points current at version's binary, atomically: install.sh
// does it once, and so do tests.
func (l Layout) SetCurrent(version string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	return l.relink(currentLink, version)
}

func (l Layout) relink(name, version string) error {
	tmp := filepath.Join(l.Dir, "."+name+".new")
	_ = os.Remove(tmp)
	if err := os.Symlink(version, tmp); err != nil {
		return fmt.Errorf("link %s to %s: %w", name, version, err)
	}
	if err := os.Rename(tmp, filepath.Join(l.Dir, name)); err != nil {
		return fmt.Errorf("link %s to %s: %w", name, version, err)
	}
	return syncDir(l.Dir)
}

// Commit renames next over current: the one step that makes the new
// binary what every start runs.
func (l Layout) Commit() error {
	if err := os.Rename(l.Next(), l.Current()); err != nil {
		return fmt.Errorf("commit the trial: %w", err)
	}
	return syncDir(l.Dir)
}

// ClearNext removes next (none is fine).
func (l Layout) ClearNext() error {
	err := os.Remove(l.Next())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the trial link: %w", err)
	}
	return syncDir(l.Dir)
}

// Prune removes the binaries (and leftover partial files) other than
// keep's versions and those current and next name: the previous release
// stays for one more upgrade when the caller keeps it.
func (l Layout) Prune(keep ...string) error {
	for _, name := range []string{currentLink, nextLink} {
		if v, err := l.link(name); err == nil {
			keep = append(keep, v)
		}
	}
	ents, err := os.ReadDir(l.Dir)
	if err != nil {
		return fmt.Errorf("prune %s: %w", l.Dir, err)
	}
	for _, e := range ents {
		n := e.Name()
		partial := strings.HasPrefix(n, ".") && strings.Contains(n, ".part-")
		if e.Type()&os.ModeSymlink != 0 || slices.Contains(keep, n) || (!partial && checkVersion(n) != nil) {
			continue
		}
		if err := os.Remove(filepath.Join(l.Dir, n)); err != nil {
			return fmt.Errorf("prune %s: %w", l.Dir, err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
