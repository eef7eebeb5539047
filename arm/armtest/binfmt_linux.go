package armtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// BinfmtDir is where the kernel's binfmt_misc filesystem is mounted.
const BinfmtDir = "/proc/sys/fs/binfmt_misc"

// BinfmtConfDirs are searched, in order, for NAME.conf, the registration
// line qemu-user-static ships (Debian: /usr/lib/binfmt.d/qemu-aarch64.conf).
var BinfmtConfDirs = []string{"/etc/binfmt.d", "/usr/lib/binfmt.d", "/lib/binfmt.d"}

// EnsureBinfmt makes the kernel run the foreign binaries of the
// qemu-user-static handler name ("qemu-aarch64", "qemu-arm") through its
// interpreter: it mounts binfmt_misc on BinfmtDir if needed and, unless
// BinfmtDir/name is already registered, writes the line of name.conf from
// BinfmtConfDirs into BinfmtDir/register. A registered but disabled entry
// is enabled. It needs root. Registration is global to the host (all mount
// namespaces, containers included) and lasts until reboot; Debian's lines
// carry the F flag, so the interpreter is opened now and works inside
// containers' root filesystems.
func EnsureBinfmt(name string) error {
	if strings.ContainsAny(name, "/:") || name == "" || name == "register" || name == "status" {
		return fmt.Errorf("binfmt: bad handler name %q", name)
	}
	if err := mountBinfmt(); err != nil {
		return err
	}
	status, err := os.ReadFile(filepath.Join(BinfmtDir, "status"))
	if err != nil {
		return fmt.Errorf("binfmt: %w", err)
	}
	if strings.TrimSpace(string(status)) != "enabled" {
		return fmt.Errorf("binfmt: %s/status is %q: binfmt_misc is switched off on this host (echo 1 > %s/status)", BinfmtDir, strings.TrimSpace(string(status)), BinfmtDir)
	}
	entry := filepath.Join(BinfmtDir, name)
	if enabled, err := entryEnabled(entry); err == nil {
		if enabled {
			return nil
		}
		if err := os.WriteFile(entry, []byte("1"), 0); err != nil {
			return fmt.Errorf("binfmt: enable %s: %w", name, err)
		}
		return checkEntry(entry)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("binfmt: %w", err)
	}

	line, conf, err := registrationLine(name)
	if err != nil {
		return err
	}
	// :name:type:offset:magic:mask:interpreter:flags; the kernel opens the
	// interpreter on registration with the F flag, and on exec otherwise.
	fields := strings.Split(line, ":")
	if len(fields) != 8 || fields[1] != name {
		return fmt.Errorf("binfmt: %s: want :%s:type:offset:magic:mask:interpreter:flags, got %q", conf, name, line)
	}
	if _, err := os.Stat(fields[6]); err != nil {
		return fmt.Errorf("binfmt: interpreter of %s: %w (apt-get install -y qemu-user-static)", conf, err)
	}
	f, err := os.OpenFile(filepath.Join(BinfmtDir, "register"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("binfmt: %w", err)
	}
	_, werr := f.Write([]byte(line))
	cerr := f.Close()
	// EEXIST: registered concurrently since the check above.
	if werr != nil && !errors.Is(werr, syscall.EEXIST) {
		return fmt.Errorf("binfmt: register %s from %s: %w", name, conf, werr)
	}
	if cerr != nil && !errors.Is(cerr, syscall.EEXIST) {
		return fmt.Errorf("binfmt: register %s: %w", name, cerr)
	}
	return checkEntry(entry)
}

// mountBinfmt mounts binfmt_misc on BinfmtDir unless it is mounted.
func mountBinfmt() error {
	register := filepath.Join(BinfmtDir, "register")
	if _, err := os.Stat(register); err == nil {
		return nil
	}
	err := syscall.Mount("binfmt_misc", BinfmtDir, "binfmt_misc", 0, "")
	if err != nil && !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("binfmt: mount -t binfmt_misc binfmt_misc %s: %w (needs root; is binfmt_misc in /proc/filesystems?)", BinfmtDir, err)
	}
	if _, err := os.Stat(register); err != nil {
		return fmt.Errorf("binfmt: after mounting binfmt_misc: %w", err)
	}
	return nil
}

// entryEnabled reports whether the registered entry is enabled; the error
// wraps fs.ErrNotExist when it is not registered.
func entryEnabled(entry string) (bool, error) {
	b, err := os.ReadFile(entry)
	if err != nil {
		return false, err
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	return string(first) == "enabled", nil
}

func checkEntry(entry string) error {
	enabled, err := entryEnabled(entry)
	if err != nil {
		return fmt.Errorf("binfmt: %w", err)
	}
	if !enabled {
		return fmt.Errorf("binfmt: %s is registered but disabled", entry)
	}
	return nil
}

// registrationLine returns the first registration line of name.conf.
func registrationLine(name string) (line, path string, err error) {
	for _, dir := range BinfmtConfDirs {
		path = filepath.Join(dir, name+".conf")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", "", fmt.Errorf("binfmt: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ";") {
				return l, path, nil
			}
		}
		return "", "", fmt.Errorf("binfmt: %s has no registration line", path)
	}
	return "", "", fmt.Errorf("binfmt: no %s.conf in %s (apt-get install -y qemu-user-static)", name, strings.Join(BinfmtConfDirs, ", "))
}
