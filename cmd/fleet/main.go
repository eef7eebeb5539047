// Command fleet is the command-line client of a Fleet hub, in the manner of
// kubectl: apply manifests, get, describe, diff and delete deployments and
// devices. It talks to the hub's HTTP API only (the client package).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fleetmq/fleet/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, getenv: os.Getenv})
	stop()
	printError(os.Stderr, err)
	os.Exit(exitCode(err))
}

// stdio is the process environment run works in; tests fake it.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	getenv   func(string) string
	// workDir is where ./fleet-data/admin.conf is looked for; "" means
	// the working directory.
	workDir string
	// now is the clock for ages; nil means time.Now.
	now func() time.Time
}

// run executes the command line args (without the program name).
func run(ctx context.Context, args []string, io stdio) error {
	cli := newCLIContext(io)
	root := newRootCmd(cli)
	root.SetArgs(args)
	root.SetIn(io.in)
	root.SetOut(io.out)
	root.SetErr(io.err)
	return cli.explain(root.ExecuteContext(ctx))
}

// exitError ends the process with code, after printing err unless it is
// nil (diff uses code 1 to say "there are differences").
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode maps run's error to the process exit status: 0 for none, the
// code of an *exitError, else 1.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// printError writes err to w as kubectl does: "Error from server
// (Reason): message" for an answer of the hub, "error: message" otherwise;
// one line per error of a joined error, then any hint.
func printError(w io.Writer, err error) {
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err == nil {
			return
		}
		err = ee.err
	}
	var h *hintError
	if errors.As(err, &h) {
		printError(w, h.err)
		fmt.Fprintln(w, h.hint)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			printError(w, e)
		}
		return
	}
	if ae, ok := err.(*client.APIError); ok {
		fmt.Fprintf(w, "Error from server (%s): %s\n", ae.Status.Reason, ae.Error())
		return
	}
	fmt.Fprintf(w, "error: %s\n", err)
}

// hintError is an error with advice on what to do about it, printed on a
// line of its own.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "\n" + e.hint }
func (e *hintError) Unwrap() error { return e.err }
