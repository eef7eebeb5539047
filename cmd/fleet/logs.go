package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

type logsOptions struct {
	container      string
	tail           int64
	since          time.Duration
	timestamps     bool
	follow         bool
	previous       bool
	limitBytes     int64
	selector       string
	maxLogRequests int
	prefix         bool
}

func newLogsCmd(cli *cliContext) *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs (DEVICE/POD [CONTAINER] | deployment/NAME [-l key=value,...]) [-c CONTAINER] [--tail N] [--since 10m] [-f] [--previous]",
		Short: "Print the logs of a container on a device",
		Long: `Print the log of a container on a device, read from the device through the
hub (over the device's MQTT session, so it works behind NAT).

DEVICE/POD names one pod on one device (pod/DEVICE/POD too). A pod is named
after its deployment. -c names the container (or, as with kubectl, a second
argument); it may be left out when the pod has one.

deployment/NAME reads the pod NAME on every device that runs it, or should
(-l narrows the devices by their labels): every line is prefixed with
[DEVICE/POD/CONTAINER], whole lines only. Every container of the pod is
read unless -c names one. A device that fails is reported on stderr and
the others go on; the exit status is then 1.

-f follows the log until Ctrl-C. --previous prints the log of the
container's previous run: why it last crashed.

When a device is offline, the hub answers with the last lines the device
reported when the container crashed (a crash report), says so on stderr
("Warning: ..."), or fails with "device ... is offline".`,
		Example: `  # The last 20 lines of the pod web on pi-kitchen
  fleet logs pi-kitchen/web --tail 20

  # Follow the container app of that pod, with timestamps
  fleet logs pi-kitchen/web -c app -f --timestamps
  fleet logs pi-kitchen/web app -f --timestamps

  # Why did it crash? The log of the previous run (or the crash report)
  fleet logs pi-kitchen/web --previous

  # The last 10 minutes of web on every lab device, prefixed
  fleet logs deployment/web -l site=lab --since 10m`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if o.container != "" && o.container != args[1] {
					return fmt.Errorf("only one of -c or an inline CONTAINER argument is allowed (got -c %s and %s)", o.container, args[1])
				}
				o.container = args[1]
			}
			return runLogs(cmd.Context(), cli, args[0], o, cmd.Flags().Changed("prefix"))
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.container, "container", "c", "", "the container to read (may be left out when the pod has one)")
	f.Int64Var(&o.tail, "tail", -1, "only the last N lines (-1: all)")
	f.DurationVar(&o.since, "since", 0, "only lines newer than this, e.g. 10m or 2h (0: all)")
	f.BoolVar(&o.timestamps, "timestamps", false, "prefix every line with its time (RFC 3339)")
	f.BoolVarP(&o.follow, "follow", "f", false, "stream new lines until Ctrl-C")
	f.BoolVarP(&o.previous, "previous", "p", false, "the log of the container's previous run (after a crash or restart)")
	f.Int64Var(&o.limitBytes, "limit-bytes", 0, "stop after this many bytes of each log (0: no limit)")
	f.StringVarP(&o.selector, "selector", "l", "", selectorUsage("with deployment/NAME, only the devices"))
	f.IntVar(&o.maxLogRequests, "max-log-requests", 10, "with deployment/NAME, at most this many logs read at once; with -f, at most this many followed")
	f.BoolVar(&o.prefix, "prefix", false, "prefix every line with [DEVICE/POD/CONTAINER] (always on with deployment/NAME)")
	return cmd
}

// logTarget is one container log to read.
type logTarget struct {
	device, pod, container string
}

func (t logTarget) String() string {
	if t.container == "" {
		return t.device + "/" + t.pod
	}
	return t.device + "/" + t.pod + "/" + t.container
}

func (o logsOptions) schemaOptions(container string) (schema.LogOptions, error) {
	lo := schema.LogOptions{Container: container, Timestamps: o.timestamps, Follow: o.follow, Previous: o.previous, LimitBytes: o.limitBytes}
	switch {
	case o.tail >= 0:
		t := o.tail
		lo.TailLines = &t
	case o.tail != -1:
		return lo, fmt.Errorf("--tail %d: want -1 (all lines) or more", o.tail)
	}
	if o.since < 0 {
		return lo, fmt.Errorf("--since %s: must not be negative", o.since)
	}
	lo.SinceSeconds = int64(math.Ceil(o.since.Seconds()))
	if o.limitBytes < 0 {
		return lo, fmt.Errorf("--limit-bytes %d: must not be negative", o.limitBytes)
	}
	return lo, nil
}

// parseLogsArg reads DEVICE/POD, pod/DEVICE/POD or deployment/NAME.
func parseLogsArg(arg string) (device, pod, deployment string, err error) {
	parts := strings.Split(arg, "/")
	if len(parts) == 3 && (parts[0] == "pod" || parts[0] == "pods" || parts[0] == "po") {
		parts = parts[1:]
	}
	if len(parts) != 2 {
		return "", "", "", fmt.Errorf("%q: want DEVICE/POD or deployment/NAME", arg)
	}
	if k, ok := resourceKinds[strings.ToLower(parts[0])]; ok && k == client.Deployments {
		if err := schema.ValidateName(parts[1]); err != nil {
			return "", "", "", fmt.Errorf("%s: deployment name %w", arg, err)
		}
		return "", "", parts[1], nil
	}
	if err := schema.ValidateName(parts[0]); err != nil {
		return "", "", "", fmt.Errorf("%s: device name %w", arg, err)
	}
	if err := schema.ValidateName(parts[1]); err != nil {
		return "", "", "", fmt.Errorf("%s: pod name %w", arg, err)
	}
	return parts[0], parts[1], "", nil
}

func runLogs(ctx context.Context, cli *cliContext, arg string, o logsOptions, prefixSet bool) error {
	device, pod, deployment, err := parseLogsArg(arg)
	if err != nil {
		return err
	}
	if _, err := o.schemaOptions(o.container); err != nil {
		return err
	}
	if err := checkSelector(o.selector); err != nil {
		return err
	}
	if o.container != "" {
		if err := schema.ValidateName(o.container); err != nil {
			return fmt.Errorf("-c: container name %w", err)
		}
	}
	if deployment == "" && o.selector != "" {
		return fmt.Errorf("-l selects devices of a deployment: use fleet logs deployment/NAME -l %s", o.selector)
	}
	if o.maxLogRequests < 1 {
		return fmt.Errorf("--max-log-requests %d: want 1 or more", o.maxLogRequests)
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	if deployment == "" {
		t := logTarget{device: device, pod: pod, container: o.container}
		return logsOne(ctx, cli, cl, t, o, prefixSet && o.prefix)
	}
	targets, err := logTargets(ctx, cli, cl, deployment, o)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return fmt.Errorf("no device runs deployment %s%s", deployment, selectorNote(o.selector))
	}
	if o.follow && len(targets) > o.maxLogRequests {
		return fmt.Errorf("you are attempting to follow %d logs, but --max-log-requests is %d: narrow the devices with -l or raise --max-log-requests", len(targets), o.maxLogRequests)
	}
	return logsMany(ctx, cli, cl, targets, o)
}

func selectorNote(sel string) string {
	if sel == "" {
		return ""
	}
	return " among the devices matching " + sel
}

// logsOne copies one log to stdout, as it comes.
func logsOne(ctx context.Context, cli *cliContext, cl *client.Client, t logTarget, o logsOptions, prefix bool) error {
	lo, _ := o.schemaOptions(t.container)
	s, err := cl.Logs(ctx, t.device, t.pod, lo)
	if err != nil {
		return err
	}
	defer s.Close()
	if w := s.Warning(); w != "" {
		fmt.Fprintf(cli.stderr(), "Warning: %s\n", w)
	}
	if prefix {
		out := &lineWriter{w: cli.stdout()}
		err = copyLines(out, s, "["+t.String()+"] ")
	} else {
		_, err = io.Copy(cli.stdout(), s)
	}
	return logsEnd(ctx, s, err)
}

// logsEnd is how a log stream ended: nil at a clean end or on Ctrl-C,
// the hub's trailer error, or the read error.
func logsEnd(ctx context.Context, s *client.LogStream, err error) error {
	if ctx.Err() != nil {
		return nil // Ctrl-C (or the end of the command's context) ends -f cleanly
	}
	if err != nil {
		return fmt.Errorf("reading the log: %w", err)
	}
	return s.Err()
}

// logTargets lists the containers of pod deployment on the devices that
// run it or should: those whose reported status has the pod, or whose
// labels the deployment's selector matches.
func logTargets(ctx context.Context, cli *cliContext, cl *client.Client, deployment string, o logsOptions) ([]logTarget, error) {
	rctx, cancel := cli.requestContext(ctx)
	defer cancel()
	dep, err := cl.GetDeployment(rctx, deployment)
	if err != nil && !client.IsNotFound(err) {
		return nil, err
	}
	devs, err := cl.ListDevices(rctx, o.selector)
	if err != nil {
		return nil, err
	}
	var out []logTarget
	for _, d := range devs.Items {
		var status *schema.PodStatus
		if d.Status != nil {
			for i := range d.Status.Pods {
				if d.Status.Pods[i].Name == deployment {
					status = &d.Status.Pods[i]
				}
			}
		}
		desired := dep != nil && dep.Spec.Selector.Matches(d.Metadata.Labels)
		if status == nil && !desired {
			continue
		}
		var names []string
		switch {
		case o.container != "":
			names = []string{o.container}
		case status != nil && len(status.Containers) > 0:
			for _, c := range status.Containers {
				names = append(names, c.Name)
			}
		case dep != nil:
			for _, c := range dep.Spec.Template.Spec.Containers {
				names = append(names, c.Name)
			}
		}
		if len(names) == 0 {
			names = []string{""} // the hub picks the pod's only container
		}
		for _, n := range names {
			out = append(out, logTarget{device: d.Metadata.Name, pod: deployment, container: n})
		}
	}
	slices.SortFunc(out, func(a, b logTarget) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// logsMany reads several logs, at most --max-log-requests at once, and
// prints their lines prefixed with [DEVICE/POD/CONTAINER]. A log that
// fails is reported on stderr; the others go on.
func logsMany(ctx context.Context, cli *cliContext, cl *client.Client, targets []logTarget, o logsOptions) error {
	out := &lineWriter{w: cli.stdout()}
	errOut := &lineWriter{w: cli.stderr()}
	sem := make(chan struct{}, o.maxLogRequests)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			prefix := "[" + t.String() + "] "
			if err := logsPrefixed(ctx, cl, t, o, out, errOut, prefix); err != nil {
				var b bytes.Buffer
				printError(&b, err)
				copyLines(errOut, &b, prefix)
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 && ctx.Err() == nil {
		return &exitError{code: 1}
	}
	return nil
}

func logsPrefixed(ctx context.Context, cl *client.Client, t logTarget, o logsOptions, out, errOut *lineWriter, prefix string) error {
	lo, _ := o.schemaOptions(t.container)
	s, err := cl.Logs(ctx, t.device, t.pod, lo)
	if err != nil {
		return err
	}
	defer s.Close()
	if w := s.Warning(); w != "" {
		errOut.line([]byte(prefix + "Warning: " + w + "\n"))
	}
	return logsEnd(ctx, s, copyLines(out, s, prefix))
}

// maxLineBytes bounds one prefixed line: a longer one is cut into lines of
// this size, each prefixed.
const maxLineBytes = 64 << 10

// lineWriter writes whole lines from several goroutines without
// interleaving them.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(b)
	return err
}

// copyLines writes every line of r to out with prefix, whole; a last line
// without a newline gets one.
func copyLines(out *lineWriter, r io.Reader, prefix string) error {
	br := bufio.NewReaderSize(r, maxLineBytes)
	buf := make([]byte, 0, 256)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			buf = append(append(buf[:0], prefix...), chunk...)
			if buf[len(buf)-1] != '\n' {
				buf = append(buf, '\n')
			}
			if werr := out.line(buf); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}
