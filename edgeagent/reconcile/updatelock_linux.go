//go:build linux

package reconcile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// lockHolder reports whether a process holds a flock on a regular file
// of dir, and who: "FILE: pid N (COMM)" when /proc/locks says. The agent
// tests each file with a non-blocking exclusive flock of its own, which
// it releases at once; a holder that crashed has released its lock.
func lockHolder(dir string) (string, bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) // closing releases it too
			f.Close()
			continue
		}
		var ino uint64
		if fi, serr := f.Stat(); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				ino = st.Ino
			}
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			continue
		}
		return e.Name() + ": " + flockPIDs(ino), true
	}
	return "", false
}

// flockPIDs names the processes /proc/locks says hold a flock on inode
// ino, with their command names.
func flockPIDs(ino uint64) string {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return "unknown process"
	}
	defer f.Close()
	var who []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" {
			continue
		}
		parts := strings.Split(fs[5], ":")
		if n, err := strconv.ParseUint(parts[len(parts)-1], 10, 64); err != nil || n != ino {
			continue
		}
		pid := fs[4]
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		s := "pid " + pid
		if c := strings.TrimSpace(string(comm)); c != "" {
			s += fmt.Sprintf(" (%s)", c)
		}
		who = append(who, s)
	}
	if len(who) == 0 {
		return "unknown process"
	}
	slices.Sort(who)
	return strings.Join(slices.Compact(who), ", ")
}
