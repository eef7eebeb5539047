package containerdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Restart stops the daemon (SIGTERM) and starts it again on the same
// directories and socket, as `systemctl restart containerd` or a package
// upgrade does: running tasks stay in their shims and the daemon finds
// them again. It returns once the daemon answers; Client keeps working
// (it reconnects). The log continues in the same file.
func (d *Daemon) Restart(ctx context.Context) error {
	if d.cmd == nil || d.client == nil {
		return errors.New("restart containerd: not started")
	}
	if err := d.stopDaemon(); err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	lf, err := os.OpenFile(d.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	fmt.Fprintf(lf, "--- containerdtest: restarting the daemon\n")
	if d.logFile != nil {
		_ = d.logFile.Close()
	}
	d.logFile = lf
	d.exited = make(chan struct{})
	d.cmd = exec.Command("containerd", "--config", d.ConfigPath(),
		"--root", d.Root(), "--state", d.State(), "--address", d.Socket())
	d.cmd.Stdout, d.cmd.Stderr = lf, lf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		close(d.exited)
		return fmt.Errorf("restart containerd: %w", err)
	}
	exited := d.exited
	cmd := d.cmd
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	for {
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := d.client.Version(vctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("restart containerd: the daemon exited: %s", d.LogTail(20))
		case <-ctx.Done():
			return fmt.Errorf("restart containerd: not ready (last error: %v): %w", err, ctx.Err())
		case <-time.After(50 * time.Millisecond): // poll interval
		}
	}
}
