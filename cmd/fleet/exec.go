package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

type execOptions struct {
	container string
	stdin     bool
	tty       bool
}

func newExecCmd(cli *cliContext) *cobra.Command {
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec DEVICE/POD [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command in a container on a device",
		Long: `Run a command in a running container on a device, through the hub (over the
device's MQTT session, so it works behind NAT). Admin credentials only; the
hub records every exec (who, when, which command) in the device's events.

Without -i and -t the command gets no input; its output and error output
are copied to yours and fleet exits with the command's exit code.

-i passes your input to the command (end it with Ctrl-D, or close the pipe).
-t gives the command a terminal: your terminal is switched to raw mode, so
every key (Ctrl-C, Ctrl-D, arrows) goes to the command; window size changes
follow. -t needs a terminal on fleet's input: use -i alone to pipe input.
Your terminal is restored however the command ends.

Everything after -- is the command; it is not read as fleet's flags.`,
		Example: `  # Read a file in the pod web on pi-kitchen
  fleet exec pi-kitchen/web -- cat /etc/hostname

  # In its container app, and use the exit code
  fleet exec pi-kitchen/web -c app -- test -f /data/ready && echo ready

  # An interactive shell
  fleet exec -it pi-kitchen/web -- sh

  # Pipe input to a command
  echo 'SELECT 1;' | fleet exec -i pi-kitchen/db -- sqlite3 /data/app.db`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExec(cmd.Context(), cli, args, cmd.ArgsLenAtDash(), o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.container, "container", "c", "", "the container to run the command in (may be left out when the pod has one)")
	f.BoolVarP(&o.stdin, "stdin", "i", false, "pass fleet's input to the command")
	f.BoolVarP(&o.tty, "tty", "t", false, "run the command with a terminal (needs a terminal on fleet's input; use with -i)")
	return cmd
}

// errNoTTY is -t without a terminal on fleet's input.
var errNoTTY = errors.New("unable to use a TTY: fleet's input is not a terminal; run fleet exec from a terminal, or leave out -t (use -i alone to pipe input to the command)")

// fdReader is an input with a file descriptor: a terminal, perhaps.
type fdReader interface {
	io.Reader
	Fd() uintptr
}

func runExec(ctx context.Context, cli *cliContext, args []string, dashAt int, o execOptions) error {
	if dashAt != 1 || len(args) < 2 {
		return errors.New("fleet exec needs a pod and a command after --: fleet exec DEVICE/POD [-c CONTAINER] -- COMMAND [ARG...]")
	}
	device, pod, deployment, err := parseLogsArg(args[0])
	if err != nil {
		return err
	}
	if deployment != "" {
		return fmt.Errorf("%s: exec runs in one pod on one device: use DEVICE/POD", args[0])
	}
	if o.container != "" {
		if err := schema.ValidateName(o.container); err != nil {
			return fmt.Errorf("-c: container name %w", err)
		}
	}
	eo := schema.ExecOptions{Pod: pod, Container: o.container, Command: args[1:], TTY: o.tty, Stdin: o.stdin}
	fd := -1
	if o.tty {
		in, ok := cli.io.in.(fdReader)
		if !ok || !term.IsTerminal(int(in.Fd())) {
			return errNoTTY
		}
		fd = int(in.Fd())
		if size, ok := termSize(fd); ok {
			eo.Size = &size
		}
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	s, err := cl.Exec(ctx, device, pod, eo)
	if err != nil {
		return err
	}
	defer s.Close()
	if o.tty {
		// Register for window changes before the terminal goes raw, so
		// that no change after that is missed.
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		done := make(chan struct{})
		defer close(done)
		go followSize(fd, eo.Size, winch, done, s)
		if o.stdin {
			old, err := term.MakeRaw(fd)
			if err != nil {
				return fmt.Errorf("switch the terminal to raw mode: %w", err)
			}
			defer term.Restore(fd, old)
		}
	}
	if o.stdin {
		go sendStdin(cli.io.in, s)
	}
	x, err := s.Copy(cli.stdout(), cli.stderr())
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130} // interrupted: the command was cancelled
		}
		return err
	}
	if x.Error != "" {
		return fmt.Errorf("exec in %s/%s: %s", device, pod, x.Error)
	}
	if x.ExitCode != 0 {
		return &exitError{code: x.ExitCode}
	}
	return nil
}

func termSize(fd int) (schema.TermSize, bool) {
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 || w > 0xffff || h > 0xffff {
		return schema.TermSize{}, false
	}
	return schema.TermSize{Cols: uint16(w), Rows: uint16(h)}, true
}

// followSize sends the terminal's size whenever it changes (SIGWINCH).
func followSize(fd int, last *schema.TermSize, winch <-chan os.Signal, done <-chan struct{}, s *client.ExecStream) {
	var cur schema.TermSize
	if last != nil {
		cur = *last
	}
	for {
		select {
		case <-done:
			return
		case <-winch:
		}
		size, ok := termSize(fd)
		if !ok || size == cur {
			continue
		}
		cur = size
		if err := s.Resize(size); err != nil {
			return
		}
	}
}

// sendStdin copies fleet's input to the command, then closes its input.
// It ends when the input ends or the stream is closed.
func sendStdin(in io.Reader, s *client.ExecStream) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if s.Stdin(buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.CloseStdin()
			}
			return
		}
	}
}
