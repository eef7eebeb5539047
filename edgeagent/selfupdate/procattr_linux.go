package selfupdate

import "syscall"

// trialProcAttr makes the child die with the agent that started it, in a
// process group of its own, so a failed trial is killed whole.
func trialProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
