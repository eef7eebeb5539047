package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/fleetmq/fleet/hub/store"
)

// maxFilePart bounds a data-directory file read from a backup.
const maxFilePart = 16 << 20

// visitFunc receives each part but the manifest, in archive order.
type visitFunc func(name string, mode os.FileMode, r io.Reader) error

// read decrypts a backup, hands every part to visit while it digests
// them, and checks them against the manifest at the end. Nothing a visit
// did may be trusted before read returned nil.
func read(r io.Reader, key Key, visit visitFunc) (Manifest, error) {
	var m Manifest
	ids, err := key.identities()
	if err != nil {
		return m, err
	}
	br := bufio.NewReader(r)
	if head, _ := br.Peek(len("age-encryption.org/")); string(head) != "age-encryption.org/" {
		return m, fmt.Errorf("%w: the file is not age-encrypted (a Fleet backup starts with \"age-encryption.org/v1\")", ErrNotBackup)
	}
	dec, err := age.Decrypt(br, ids...)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return m, fmt.Errorf("%w: %w", ErrWrongKey, err)
		}
		return m, fmt.Errorf("%w: header: %w", ErrCorrupt, err)
	}
	tr := tar.NewReader(dec)
	seen := map[string]Part{}
	var manifest []byte
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, damaged(err)
		}
		if manifest != nil {
			return m, fmt.Errorf("%w: a part after the manifest", ErrCorrupt)
		}
		if hdr.Name == partManifest {
			if manifest, err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
				return m, damaged(err)
			}
			continue
		}
		if err := checkPartName(hdr.Name); err != nil {
			return m, err
		}
		h := sha256.New()
		cr := &countReader{r: io.TeeReader(tr, h)}
		if err := visit(hdr.Name, os.FileMode(hdr.Mode).Perm(), cr); err != nil {
			return m, err
		}
		// Whatever visit left unread is digested too.
		if _, err := io.Copy(io.Discard, cr); err != nil {
			return m, damaged(err)
		}
		seen[hdr.Name] = Part{Name: hdr.Name, Size: cr.n, SHA256: hex.EncodeToString(h.Sum(nil))}
	}
	if manifest == nil {
		return m, fmt.Errorf("%w: no manifest (the file is cut short, or not a Fleet backup)", ErrCorrupt)
	}
	if err := json.Unmarshal(manifest, &m); err != nil || m.Format != Format {
		return m, fmt.Errorf("%w: no %s manifest", ErrNotBackup, Format)
	}
	if m.Version != FormatVersion {
		return m, fmt.Errorf("backup format version %d: this fleet-hub reads version %d", m.Version, FormatVersion)
	}
	return m, checkParts(m, seen)
}

// checkParts compares the parts read with the manifest's digests.
func checkParts(m Manifest, seen map[string]Part) error {
	if len(seen) != len(m.Parts) {
		return fmt.Errorf("%w: %d parts, the manifest lists %d", ErrCorrupt, len(seen), len(m.Parts))
	}
	for _, want := range m.Parts {
		if got, ok := seen[want.Name]; !ok || got != want {
			return fmt.Errorf("%w: part %s does not match its digest in the manifest", ErrCorrupt, want.Name)
		}
	}
	if _, ok := seen[partStore]; !ok {
		return fmt.Errorf("%w: no store in the backup", ErrCorrupt)
	}
	return nil
}

// damaged wraps a read error: age fails with an authentication error on
// a changed byte, tar with a format error on a cut.
func damaged(err error) error {
	return fmt.Errorf("%w (changed or cut short after it was written): %w", ErrCorrupt, err)
}

// checkPartName refuses a part that could write outside the data
// directory.
func checkPartName(name string) error {
	if name == partStore {
		return nil
	}
	base, ok := strings.CutPrefix(name, filesDir)
	if !ok || base == "" || strings.ContainsAny(base, `/\`) || base == "." || base == ".." || base == storeDirName {
		return fmt.Errorf("%w: unexpected part %q", ErrNotBackup, name)
	}
	return nil
}

// Inspect reads and checks a whole backup and returns its manifest.
func Inspect(r io.Reader, key Key) (Manifest, error) {
	return read(r, key, func(string, os.FileMode, io.Reader) error { return nil })
}

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// DataDir is the data directory to create: it must not exist or be
	// empty.
	DataDir string
	// From names the backup (recorded in the store).
	From string
}

// Restore creates o.DataDir from a backup. It writes into a temporary
// directory beside it, renamed into place only when every part was
// written and matched the manifest: on any error nothing is left and
// nothing was overwritten.
func Restore(ctx context.Context, r io.Reader, key Key, o RestoreOptions) (Manifest, error) {
	dir := filepath.Clean(o.DataDir)
	if err := requireEmpty(dir); err != nil {
		return Manifest{}, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restoring-")
	if err != nil {
		return Manifest{}, fmt.Errorf("restore: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	m, err := read(r, key, func(name string, mode os.FileMode, pr io.Reader) error {
		if name == partStore {
			_, err := store.RestoreSnapshot(ctx, store.RestoreOptions{Dir: filepath.Join(tmp, storeDirName), From: o.From}, pr)
			if err != nil && ctx.Err() == nil {
				return damaged(err)
			}
			return err
		}
		return restoreFile(filepath.Join(tmp, strings.TrimPrefix(name, filesDir)), mode, pr)
	})
	if err != nil {
		return m, err
	}
	if err := syncPath(tmp); err != nil {
		return m, err
	}
	// An empty directory given by the operator (a mount point, say) is
	// replaced by the restored one.
	if _, err := os.Stat(dir); err == nil {
		if err := os.Remove(dir); err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	ok = true
	return m, syncPath(parent)
}

// requireEmpty accepts a directory that does not exist or is empty.
func requireEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("restore: --data-dir: %w", err)
	case len(entries) == 0:
		return nil
	}
	what := "files"
	for _, e := range entries {
		if e.Name() == storeDirName || e.Name() == "ca.crt" {
			what = "a hub's data (" + e.Name() + ")"
			break
		}
	}
	return fmt.Errorf("--data-dir %s is not empty: it holds %s; restore writes only into an empty or new directory, nothing was written", dir, what)
}

// restoreFile writes a data-directory file: mode 0600 unless it was
// world-readable (a certificate), synced.
func restoreFile(path string, mode os.FileMode, r io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(r, maxFilePart+1))
	if err != nil {
		return damaged(err)
	}
	if len(data) > maxFilePart {
		return fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, filepath.Base(path), maxFilePart)
	}
	if mode&0o044 == 0 || mode&0o002 != 0 {
		mode = 0o600
	} else {
		mode = 0o644
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		_ = f.Close()
		return fmt.Errorf("restore: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("restore: %w", err)
	}
	return f.Close()
}

func syncPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("restore: sync %s: %w", dir, err)
	}
	return nil
}

// Age is how old a backup is at now, rounded to the second.
func (m Manifest) Age(now time.Time) time.Duration {
	return now.Sub(m.Created).Round(time.Second)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
