package volumes

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/podconfig"
)

// dataLink is the symbolic link to the directory holding a projected
// volume's current files.
const dataLink = "..data"

// currentDigest returns the digest of the files a projected volume holds
// (part of its data directory's name), or "".
func currentDigest(dir string) string {
	target, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(target, '.')
	if i < 0 {
		return ""
	}
	return target[i+1:]
}

// checkPath refuses a file path that is not a clean relative path inside
// the volume, or whose first element starts with "..", the prefix of the
// volume's own entries.
func checkPath(p string) error {
	if err := checkRelPath(p); err != nil {
		return err
	}
	if strings.HasPrefix(p, "..") {
		return fmt.Errorf("path %q may not start with '..'", p)
	}
	return nil
}

// checkRelPath refuses a path that is not a clean relative path inside
// the volume.
func checkRelPath(p string) error {
	if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q is not a clean relative path", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("path %q leaves the volume", p)
		}
	}
	return nil
}

// writeProjected makes dir hold exactly files, as the kubelet's atomic
// writer does: the files are written to a new directory
// ..{time}.{digest}, the link ..data is switched to it with one rename,
// each top-level name is a link into ..data, and the directory before the
// previous one goes.
// A reader following dir/NAME sees either the old or the new content.
// Nothing is written when dir holds these files already. uid and gid
// (-1: leave) own the new files.
func writeProjected(dir string, files []podconfig.File, uid, gid int) (changed bool, err error) {
	digest := digestFiles(files, uid, gid)
	if currentDigest(dir) == digest {
		return false, nil
	}
	top := map[string]bool{}
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return false, err
		}
		first, _, _ := strings.Cut(f.Path, "/")
		top[first] = true
	}

	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, err
	}
	name := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.") + hex.EncodeToString(rnd[:]) + "." + digest
	data := filepath.Join(dir, name)
	if err := os.Mkdir(data, 0o755); err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(data)
		}
	}()
	if err := os.Chmod(data, 0o755); err != nil {
		return false, err
	}
	for _, f := range files {
		if err := writeFile(data, f, uid, gid); err != nil {
			return false, err
		}
	}

	// The directory ..data points to now stays until the next update: a
	// reader whose path walk read the link just before the switch still
	// finds its file (the kubelet removes it at once, a narrow race).
	previous, _ := os.Readlink(filepath.Join(dir, dataLink))
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink) // left by an interrupted write
	if err := os.Symlink(name, tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		_ = os.Remove(tmpLink)
		return false, err
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, err
	}
	present := map[string]bool{}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == dataLink || n == name || n == previous:
		case strings.HasPrefix(n, ".."):
			errs = append(errs, os.RemoveAll(filepath.Join(dir, n))) // an older data directory
		case e.Type()&fs.ModeSymlink != 0 && top[n]:
			present[n] = true
		default:
			errs = append(errs, os.RemoveAll(filepath.Join(dir, n))) // no longer a file of the volume
		}
	}
	for n := range top {
		if !present[n] {
			errs = append(errs, os.Symlink(path.Join(dataLink, n), filepath.Join(dir, n)))
		}
	}
	return true, errors.Join(errs...)
}

// writeFile writes one file (and the directories of its path) under the
// data directory.
func writeFile(data string, f podconfig.File, uid, gid int) error {
	p := filepath.Join(data, filepath.FromSlash(f.Path))
	if d := filepath.Dir(p); d != data {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		for x := d; x != data; x = filepath.Dir(x) {
			if err := os.Chmod(x, 0o755); err != nil {
				return err
			}
			if uid >= 0 || gid >= 0 {
				if err := os.Lchown(x, uid, gid); err != nil {
					return err
				}
			}
		}
	}
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if uid >= 0 || gid >= 0 {
		if err := fh.Chown(uid, gid); err != nil {
			fh.Close()
			return err
		}
	}
	if _, err := fh.Write(f.Data); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Chmod(f.Mode & fs.ModePerm); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
