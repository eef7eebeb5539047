// Command agentimage packs the cross-built fleet-agent binaries of
// `make arm` (dist/) into one multi-arch OCI image, the image an
// AgentRollout names: one platform per build, each a single layer from
// scratch holding /fleet-agent (mode 0755). It pushes the image index to a
// registry, or writes it as an OCI image layout or as a tarball that
// `ctr images import` accepts, and prints the SHA-256 of each binary and the
// `fleet agent upgrade` line that rolls the release out.
//
// Run it as `make agent-image`, or directly:
//
//	go run ./arm/agentimage --push registry.example.com/fleet/agent:v1.4.0
//	go run ./arm/agentimage -o dist/fleet-agent-image.tar
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usageText = `agentimage packs the agent builds of ` + "`make arm`" + ` into a multi-arch OCI image.

Usage:
  agentimage (--push REGISTRY/REPO:TAG | --oci-layout DIR | -o FILE.tar) [flags]

It reads DIST/fleet-agent-linux-{amd64,arm64,armv7,armv6} (those that were
built), checks each against DIST/SHA256SUMS, and makes an image index with
one image per platform: linux/amd64, linux/arm64, and linux/arm/v7 plus
linux/arm/v6. Each image is a single layer from scratch holding
/fleet-agent (mode 0755), labelled with the version (--version, else
DIST/VERSION, which make arm writes).

The signed desired state names one digest per Go architecture, and arm
covers armv7 and armv6: both arm platforms therefore carry the one binary
--arm-build names (default armv6, which runs on both). With
--arm-build armv7 the image has linux/arm/v7 only.

It prints, per platform, the SHA-256 of the binary (the digest the agent
checks) and the ` + "`fleet agent upgrade --to VERSION ...`" + ` line to run. Nothing is
pushed or written when a dist file is missing or does not match SHA256SUMS.

Pushing uses the credentials of the docker config (~/.docker/config.json,
$DOCKER_CONFIG, credential helpers), as ` + "`docker login`" + ` leaves them.

Examples:
  # Build the agents, then push the image (what ` + "`make agent-image AGENT_IMAGE=...`" + ` does)
  make arm
  go run ./arm/agentimage --push registry.example.com/fleet/agent:v1.4.0

  # A registry on plain HTTP (a lab registry:2 on port 5000)
  go run ./arm/agentimage --push 192.168.1.10:5000/fleet/agent:v1.4.0 --insecure

  # No registry: a tarball to import on a device
  go run ./arm/agentimage -o dist/fleet-agent-image.tar
  ctr -n fleet images import --all-platforms fleet-agent-image.tar

  # Only the 64-bit builds, as an OCI image layout directory
  go run ./arm/agentimage --platforms linux/arm64,linux/amd64 --oci-layout dist/agent-oci

Flags:
`

// options are the command line of agentimage.
type options struct {
	dist      string
	version   string
	platforms string
	armBuild  string
	push      string
	insecure  bool
	ociLayout string
	output    string
	name      string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentimage:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a bad command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parseFlags parses args into options.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("agentimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dist, "dist", "dist", "directory with the builds of make arm and their SHA256SUMS")
	fs.StringVar(&o.version, "version", "", "agent release the image holds, such as v1.4.0 (default: DIST/VERSION, which make arm writes)")
	fs.StringVar(&o.platforms, "platforms", "", "comma-separated platforms to include, such as linux/arm64,linux/arm/v6 (default: every one built in --dist)")
	fs.StringVar(&o.armBuild, "arm-build", "", "which arm build both arm platforms carry: armv6 (runs on v6 and v7) or armv7 (linux/arm/v7 only) (default armv6 when built)")
	fs.StringVar(&o.push, "push", "", "push the image index to `REGISTRY/REPO:TAG`")
	fs.BoolVar(&o.insecure, "insecure", false, "with --push: the registry speaks plain HTTP")
	fs.StringVar(&o.ociLayout, "oci-layout", "", "write an OCI image layout into `DIR` (new or empty)")
	fs.StringVar(&o.output, "o", "", "write an OCI image layout tarball to `FILE.tar` (for ctr images import)")
	fs.StringVar(&o.name, "name", "", "image name recorded in --oci-layout and -o, such as registry.example.com/fleet/agent:v1.4.0 (default docker.io/fleetmq/fleet-agent:VERSION)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err}
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q: every input is a flag (see --help)", fs.Arg(0))
	}
	n := 0
	for _, s := range []string{o.push, o.ociLayout, o.output} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return o, usagef("give exactly one of --push REGISTRY/REPO:TAG, --oci-layout DIR or -o FILE.tar")
	}
	if o.insecure && o.push == "" {
		return o, usagef("--insecure needs --push")
	}
	if o.name != "" && o.push != "" {
		return o, usagef("--name is for --oci-layout and -o: with --push the image is named by --push")
	}
	if o.output != "" && !strings.HasSuffix(o.output, ".tar") {
		return o, usagef("-o %q: want a file name ending in .tar", o.output)
	}
	return o, nil
}

// run is the whole command: parse, read and check dist, build, then push or
// write, and print what to roll out.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dst, err := destinationFor(o)
	if err != nil {
		return err
	}
	builds, err := selectBuilds(o)
	if err != nil {
		return err
	}
	version, err := resolveVersion(o.version, o.dist, builds)
	if err != nil {
		return err
	}
	if err := dst.setVersion(version); err != nil {
		return err
	}
	idx, err := buildIndex(builds, version)
	if err != nil {
		return err
	}
	if err := dst.write(ctx, idx, stdout); err != nil {
		return err
	}
	return printSummary(stdout, dst, version, builds)
}
