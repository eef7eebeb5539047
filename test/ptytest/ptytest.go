//go:build linux

// Package ptytest opens pseudo-terminals for tests that drive a program
// through a terminal (fleet exec -it), with golang.org/x/sys/unix only.
package ptytest

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Open opens a pseudo-terminal: the master, which the test reads and
// writes as a user's terminal would, and the slave, which the program
// under test uses as its terminal. Both are closed when the test ends,
// the master first: its hangup ends a read left on the slave.
func Open(t testing.TB) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// SetSize sets the terminal's size; the kernel signals SIGWINCH to the
// terminal's foreground process group.
func SetSize(t testing.TB, f *os.File, cols, rows uint16) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		t.Fatalf("set terminal size: %v", err)
	}
}

// Termios returns the terminal's settings.
func Termios(t testing.TB, f *os.File) *unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatalf("terminal settings: %v", err)
	}
	return tio
}
