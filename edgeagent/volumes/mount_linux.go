package volumes

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/fleetmq/fleet/schema"
)

// oPath is Linux's O_PATH (the package syscall does not name it): the
// value of every architecture Fleet builds for.
const oPath = 0x200000

// Kernel is the Mounter of the running kernel.
type Kernel struct{}

// MountTmpfs implements Mounter.
func (Kernel) MountTmpfs(dir string, size int64, mode fs.FileMode) error {
	data := fmt.Sprintf("size=%d,mode=%04o", size, mode.Perm())
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, data)
}

// Bind implements Mounter.
func (Kernel) Bind(source, target string) error {
	return syscall.Mount(source, target, "", syscall.MS_BIND, "")
}

// Unmount implements Mounter: a lazy detach, as a container may still
// hold the file system.
func (Kernel) Unmount(target string) error {
	err := syscall.Unmount(target, syscall.MNT_DETACH)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return nil // not mounted (any more)
	}
	return err
}

// MountsUnder implements Mounter from /proc/self/mountinfo.
func (Kernel) MountsUnder(dir string) ([]string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == real || strings.HasPrefix(mp, real+"/") {
			// Report it under dir's name, as callers know it.
			out = append(out, dir+strings.TrimPrefix(mp, real))
		}
	}
	return out, sc.Err()
}

// mkdirAllInRoot creates the missing directories of sub in root, each
// 0777 whatever the umask (the volume's directories are; the workload may
// run as any user), never following a link out of root.
func mkdirAllInRoot(root *os.Root, sub string) error {
	prefix := ""
	for _, el := range strings.Split(sub, "/") {
		prefix = filepath.Join(prefix, el)
		if _, err := root.Lstat(prefix); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := root.Mkdir(prefix, 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := root.Chmod(prefix, 0o777); err != nil {
			return err
		}
	}
	return nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// subPath opens sub inside the volume directory src without leaving it
// (os.Root follows no link out of it), creating it first in an emptyDir
// or persistent volume, refuses it when it ends in a symbolic link, and
// bind-mounts what it opened on target, which it returns.
func (m *Manager) subPath(src, target, sub string, v *schema.Volume) (string, error) {
	if ok, err := m.mounted(target); err != nil {
		return "", fmt.Errorf("check mounts: %w", err)
	} else if ok {
		return target, nil
	}
	if err := checkRelPath(sub); err != nil {
		return "", err
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return "", err
	}
	defer root.Close()
	name := sub
	switch {
	case v.EmptyDir != nil, v.Persistent != nil:
		if err := mkdirAllInRoot(root, sub); err != nil {
			return "", err
		}
	case v.ConfigMap != nil, v.Secret != nil:
		// The volume's files are links into ..data: open the file itself.
		name = dataLink + "/" + sub
	}
	f, err := root.OpenFile(name, oPath|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	isDir := false
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		return "", errors.New("it is a symbolic link")
	case syscall.S_IFDIR:
		isDir = true
	case syscall.S_IFREG:
	default:
		return "", errors.New("it is neither a directory nor a regular file")
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return "", err
	}
	if isDir {
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	} else {
		fh, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return "", err
		}
		fh.Close()
	}
	if err := m.mounter.Bind(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), target); err != nil {
		return "", fmt.Errorf("bind mount: %w", err)
	}
	return target, nil
}
