// Command install is the first step of `make test`: it finds the system
// tools the tests need (sysdeps.Tools) and installs the missing ones with
// apt-get in one step, as root or through sudo without a password;
// otherwise it stops at once, printing the one apt-get line to run.
//
//	go run ./test/sysdeps/install          # install what is missing
//	go run ./test/sysdeps/install -check   # only report; exit 1 if any is missing
//
// Daemons that Debian starts on install (mosquitto, containerd) are stopped
// and disabled again when this step installed them: the tests start their
// own on free ports, and a test run should leave no system broker behind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/fleetmq/fleet/test/sysdeps"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, sysdeps.ErrMissing) { // the message is printed already
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(1)
	}
}

// services are the packages whose install starts a daemon.
var services = map[string]string{"mosquitto": "mosquitto", "containerd": "containerd"}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "only report what is missing; install nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	find := func(t sysdeps.Tool) error { _, err := t.Find(); return err }
	missing := sysdeps.Missing(sysdeps.Tools, find)
	host := sysdeps.Host{
		Root:      os.Geteuid() == 0,
		Apt:       hasCommand("apt-get"),
		CheckOnly: *check,
	}
	if !host.Root && len(missing) > 0 && !*check {
		host.Sudo = exec.CommandContext(ctx, "sudo", "-n", "true").Run() == nil
	}
	plan := sysdeps.Decide(missing, host)
	fmt.Fprintln(stdout, plan.Message)
	switch plan.Action {
	case sysdeps.Nothing:
		return nil
	case sysdeps.Stop:
		return sysdeps.ErrMissing
	}
	for _, c := range plan.Commands {
		fmt.Fprintf(stdout, "+ %s\n", strings.Join(c, " "))
		cmd := exec.CommandContext(ctx, c[0], c[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(c, " "), err)
		}
	}
	stopServices(ctx, plan.Packages, host.Root, stdout)
	if still := sysdeps.Missing(sysdeps.Tools, find); len(still) > 0 {
		var names []string
		for _, t := range still {
			names = append(names, t.Name)
		}
		return fmt.Errorf("%w after install: %s", sysdeps.ErrMissing, strings.Join(names, ", "))
	}
	fmt.Fprintln(stdout, "test dependencies: installed")
	return nil
}

// stopServices stops and disables the daemons that the install started.
func stopServices(ctx context.Context, installed []string, root bool, out io.Writer) {
	if !hasCommand("systemctl") {
		return
	}
	for _, pkg := range installed {
		unit, ok := services[pkg]
		if !ok {
			continue
		}
		args := []string{"systemctl", "disable", "--now", unit}
		if !root {
			args = slices.Insert(args, 0, "sudo", "-n")
		}
		// Best effort: without systemd as PID 1 (a container) there is
		// nothing to stop.
		if err := exec.CommandContext(ctx, args[0], args[1:]...).Run(); err == nil {
			fmt.Fprintf(out, "stopped the %s service that the install started (the tests start their own)\n", unit)
		} else if errors.Is(ctx.Err(), context.Canceled) {
			return
		}
	}
}

func hasCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}
