package backup

import (
	"archive/tar"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Format is the manifest's format name; FormatVersion its version.
const (
	Format        = "fleet-backup"
	FormatVersion = 1
)

// Part names inside the archive.
const (
	partStore    = "store.snap"
	partManifest = "manifest.json"
	filesDir     = "files/"
	storeDirName = "store"
)

// Errors a reader tells apart (errors.Is).
var (
	// ErrNotBackup: the file is not a Fleet backup at all.
	ErrNotBackup = errors.New("not a Fleet backup")
	// ErrWrongKey: the passphrase or identity does not open the file.
	ErrWrongKey = errors.New("wrong passphrase or identity")
	// ErrCorrupt: the file was changed or cut short after it was written.
	ErrCorrupt = errors.New("backup is damaged")
)

// Manifest is what a backup holds, without any key.
type Manifest struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	// Revision is the store revision the backup restores to, exactly.
	Revision uint64 `json:"revision"`
	// Hub identifies the hub the backup is of.
	Hub Identity `json:"hub"`
	// Objects counts the stored objects per resource.
	Objects map[string]int `json:"objects"`
	// Keys is the number of store keys.
	Keys int `json:"keys"`
	// Parts are the archive's parts but the manifest, with their digests.
	Parts []Part `json:"parts"`
}

// Identity names a hub: its store ID, its CA and its signing key.
type Identity struct {
	StoreID      string `json:"storeID"`
	CAHash       string `json:"caHash,omitempty"`
	SigningKeyID string `json:"signingKeyID,omitempty"`
}

// Part is one part of the archive.
type Part struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Snapshotter is the store as a backup needs it (store.Store is one).
type Snapshotter interface {
	Snapshot(ctx context.Context, w io.Writer) (store.SnapshotInfo, error)
}

// Source is what a backup is made of.
type Source struct {
	// Store is the open store.
	Store Snapshotter
	// DataDir is the hub's data directory: every regular file at its top
	// is saved (the store's own directory is Store's).
	DataDir string
	// Now dates the backup (default time.Now).
	Now func() time.Time
	// Progress, if set, is called with the bytes written so far.
	Progress func(written int64)
	// TempDir holds the store's snapshot while the backup is written
	// (unlinked at once; it is the store's size); default os.TempDir(),
	// which may be memory.
	TempDir string
}

// Write writes an encrypted backup of src to w and returns its manifest.
func Write(ctx context.Context, w io.Writer, src Source, key Key) (Manifest, error) {
	m := Manifest{Format: Format, Version: FormatVersion}
	if src.Now == nil {
		src.Now = time.Now
	}
	rcpts, err := key.recipients()
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	files, err := dataFiles(src.DataDir)
	if err != nil {
		return m, err
	}
	out := io.Writer(w)
	if src.Progress != nil {
		out = &progressWriter{w: w, fn: src.Progress}
	}
	enc, err := age.Encrypt(out, rcpts...)
	if err != nil {
		return m, fmt.Errorf("backup: encrypt: %w", err)
	}
	tw := tar.NewWriter(enc)
	m.Created = src.Now().UTC()
	// The store first, through a temporary file: tar needs each part's
	// size before its bytes.
	info, part, err := snapshotPart(ctx, tw, src)
	if err != nil {
		return m, err
	}
	m.Revision, m.Hub.StoreID, m.Objects, m.Keys = info.Revision, info.StoreID, info.Objects, info.Keys
	m.Parts = append(m.Parts, part)
	for _, name := range files {
		data, mode, err := readDataFile(src.DataDir, name)
		if err != nil {
			return m, err
		}
		identify(&m.Hub, name, data)
		p, err := writePart(tw, filesDir+name, data, mode, m.Created)
		if err != nil {
			return m, err
		}
		m.Parts = append(m.Parts, p)
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, fmt.Errorf("backup: manifest: %w", err)
	}
	if _, err := writePart(tw, partManifest, raw, 0o600, m.Created); err != nil {
		return m, err
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := enc.Close(); err != nil {
		return m, fmt.Errorf("backup: encrypt: %w", err)
	}
	return m, nil
}

// snapshotPart writes the store's snapshot as the archive's store part.
func snapshotPart(ctx context.Context, tw *tar.Writer, src Source) (store.SnapshotInfo, Part, error) {
	tmp, err := os.CreateTemp(src.TempDir, ".fleet-backup-store-*")
	if err != nil {
		return store.SnapshotInfo{}, Part{}, fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	// The temporary file holds the store in clear for the length of the
	// backup: unlink it at once where the system allows.
	_ = os.Remove(tmp.Name())
	info, err := src.Store.Snapshot(ctx, tmp)
	if err != nil {
		return info, Part{}, fmt.Errorf("backup: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return info, Part{}, fmt.Errorf("backup: %w", err)
	}
	hdr := &tar.Header{Name: partStore, Mode: 0o600, Size: info.Bytes, ModTime: src.Now().UTC(), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return info, Part{}, fmt.Errorf("backup: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), tmp)
	if err != nil {
		return info, Part{}, fmt.Errorf("backup: write store: %w", err)
	}
	return info, Part{Name: partStore, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func writePart(tw *tar.Writer, name string, data []byte, mode os.FileMode, at time.Time) (Part, error) {
	hdr := &tar.Header{Name: name, Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: at, Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return Part{}, fmt.Errorf("backup: %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return Part{}, fmt.Errorf("backup: %s: %w", name, err)
	}
	sum := sha256.Sum256(data)
	return Part{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// dataFiles lists the regular files at the top of the data directory,
// sorted, but temporary ones (".name.*", written by store.WriteFileAtomic)
// and what is not a regular file (the store's directory).
func dataFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("backup: data dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

func readDataFile(dir, name string) ([]byte, os.FileMode, error) {
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, fmt.Errorf("backup: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("backup: %w", err)
	}
	return data, st.Mode(), nil
}

// identify fills the hub's identity from the CA and the signing key.
func identify(id *Identity, name string, data []byte) {
	switch name {
	case "ca.crt":
		if b, _ := pem.Decode(data); b != nil {
			if c, err := x509.ParseCertificate(b.Bytes); err == nil {
				id.CAHash = schema.CAHash(c)
			}
		}
	case "signing.key":
		if b, _ := pem.Decode(data); b != nil {
			if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
				if ed, ok := k.(ed25519.PrivateKey); ok {
					id.SigningKeyID = schema.SigningKeyID(ed.Public().(ed25519.PublicKey))
				}
			}
		}
	}
}

type progressWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.fn(p.n)
	return n, err
}
