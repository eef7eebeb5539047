//go:build !linux

package selfupdate

import "syscall"

func trialProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
