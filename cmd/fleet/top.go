package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

type topOptions struct {
	selector  string
	output    string
	noHeaders bool
}

func newTopCmd(cli *cliContext) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top (devices|pods)",
		Short: "Show the CPU, memory, disk and temperature of devices and their containers",
		Long: `Show what devices and their containers use, measured now: the hub asks every
selected device that is online (over MQTT, 5 s at most) and shows the last
figures it has for the others, marked "(stale)" in the AGE column, which
says how old the figures are. Devices never measured are left out.`,
		Example: `  # How loaded, full and hot is every device
  fleet top devices

  # What the containers of one device use
  fleet top pods pi-kitchen`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("name what to show: fleet top devices, or fleet top pods")
		},
	}
	cmd.AddCommand(newTopDevicesCmd(cli), newTopPodsCmd(cli))
	return cmd
}

func addTopFlags(cmd *cobra.Command, o *topOptions) {
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", selectorUsage("only the devices"))
	addOutputFlag(cmd, &o.output, "", "output format: table (default), wide, json or yaml (a schema.TopReportList)")
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "leave out the header line of tables")
}

func newTopDevicesCmd(cli *cliContext) *cobra.Command {
	var o topOptions
	cmd := &cobra.Command{
		Use:     "devices [NAME] [-l key=value,...] [-o table|wide|json|yaml]",
		Aliases: []string{"device", "dev", "devs", "nodes"},
		Short:   "Show the load, memory, disk and temperature of devices",
		Long: `Show the figures of devices: CPU(load1) is the 1-minute load average,
MEMORY% the memory in use, DISK-FREE the free space of the agent's state
directory, TEMP the SoC temperature and THROTTLED whether a Raspberry Pi is
throttled now ("yes"), was since boot ("earlier") or not ("no"); <none>
where the device cannot tell. AGE is how old the figures are, "(stale)"
when the device did not answer and they are the last the hub has.

-o wide adds the 5 and 15-minute loads, CPUs, memory in bytes, the image
disk, uptime and the throttling flags.`,
		Example: `  fleet top devices
  fleet top devices -l site=lab -o wide
  fleet top device pi-kitchen -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTopDevices(cmd.Context(), cli, args, o)
		},
	}
	addTopFlags(cmd, &o)
	return cmd
}

func newTopPodsCmd(cli *cliContext) *cobra.Command {
	var o topOptions
	cmd := &cobra.Command{
		Use:     "pods [DEVICE[/POD]] [-l key=value,...] [-o table|wide|json|yaml]",
		Aliases: []string{"pod", "po"},
		Short:   "Show the CPU and memory of containers on devices",
		Long: `Show the figures of every running container: CPU(cores) is the rate over the
device's last measuring interval in millicores ("250m" is a quarter of a
core), MEMORY(bytes) the working set (in use minus inactive file cache, as
kubectl top shows) and LIMIT the container's memory limit. AGE is how old
the figures are, "(stale)" when the device did not answer.

-o wide adds the memory in use, the CPU time since start and the number
of processes.`,
		Example: `  # Every container of every device
  fleet top pods

  # One device, one pod
  fleet top pods pi-kitchen
  fleet top pods pi-kitchen/web

  # The lab's devices
  fleet top pods -l site=lab`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTopPods(cmd.Context(), cli, args, o)
		},
	}
	addTopFlags(cmd, &o)
	return cmd
}

// topReports reads the reports of one device, or of the selected ones.
func topReports(ctx context.Context, cli *cliContext, device string, o topOptions) ([]schema.TopReport, *printers.Printer, error) {
	if err := checkSelector(o.selector); err != nil {
		return nil, nil, err
	}
	if device != "" && o.selector != "" {
		return nil, nil, errors.New("a device NAME and a label selector (-l) cannot be combined")
	}
	p, err := cli.printer(o.output, o.noHeaders)
	if err != nil {
		return nil, nil, err
	}
	if p.Format == printers.Name {
		return nil, nil, errors.New("-o name is not supported by fleet top: use table, wide, json or yaml")
	}
	cl, err := cli.Client()
	if err != nil {
		return nil, nil, err
	}
	if device != "" {
		r, err := cl.Top(ctx, device)
		if err != nil {
			return nil, nil, err
		}
		return []schema.TopReport{*r}, p, nil
	}
	reps, err := cl.TopList(ctx, o.selector)
	return reps, p, err
}

func runTopDevices(ctx context.Context, cli *cliContext, args []string, o topOptions) error {
	var device string
	if len(args) == 1 {
		device = strings.TrimPrefix(args[0], "device/")
		if err := schema.ValidateName(device); err != nil {
			return fmt.Errorf("device name %w", err)
		}
	}
	reps, p, err := topReports(ctx, cli, device, o)
	if err != nil {
		return err
	}
	return printTop(cli, p, reps, topDeviceHeaders(p.Format == printers.Wide), func(r schema.TopReport, now time.Time) [][]string {
		return [][]string{topDeviceRow(r, p.Format == printers.Wide, now)}
	})
}

func runTopPods(ctx context.Context, cli *cliContext, args []string, o topOptions) error {
	var device, pod string
	if len(args) == 1 {
		a := strings.TrimPrefix(args[0], "pod/")
		device, pod, _ = strings.Cut(a, "/")
		if err := schema.ValidateName(device); err != nil {
			return fmt.Errorf("%s: device name %w", args[0], err)
		}
		if pod != "" {
			if err := schema.ValidateName(pod); err != nil {
				return fmt.Errorf("%s: pod name %w", args[0], err)
			}
		}
	}
	reps, p, err := topReports(ctx, cli, device, o)
	if err != nil {
		return err
	}
	if pod != "" {
		for i := range reps {
			reps[i].Containers = slices.DeleteFunc(slices.Clone(reps[i].Containers), func(c schema.ContainerMetrics) bool { return c.Pod != pod })
		}
	}
	wide := p.Format == printers.Wide
	return printTop(cli, p, reps, topPodHeaders(wide), func(r schema.TopReport, now time.Time) [][]string {
		var rows [][]string
		for _, c := range r.Containers {
			rows = append(rows, topPodRow(r, c, wide, now))
		}
		return rows
	})
}

// printTop prints reports as a schema.TopReportList (json, yaml) or a table of
// the rows each gives; a table of none says so on stderr.
func printTop(cli *cliContext, p *printers.Printer, reps []schema.TopReport, headers []string, rows func(schema.TopReport, time.Time) [][]string) error {
	if reps == nil {
		reps = []schema.TopReport{}
	}
	switch p.Format {
	case printers.JSON, printers.YAML:
		l := schema.TopReportList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "schema.TopReportList"}, Items: reps}
		if p.Format == printers.JSON {
			return printers.WriteJSON(cli.stdout(), l)
		}
		return printers.WriteYAML(cli.stdout(), l)
	}
	now := cli.now()
	var all [][]string
	stale := false
	for _, r := range reps {
		rs := rows(r, now)
		all = append(all, rs...)
		stale = stale || r.Stale && len(rs) > 0
	}
	if len(all) == 0 {
		fmt.Fprintln(cli.stderr(), "No figures found: no selected device has been measured, or none runs a container.")
		return nil
	}
	if p.NoHeaders {
		headers = nil
	}
	if err := printers.WriteTable(cli.stdout(), headers, all); err != nil {
		return err
	}
	if stale {
		fmt.Fprintln(cli.stderr(), "(stale): the device did not answer; these are the last figures the hub has.")
	}
	return nil
}

func topDeviceHeaders(wide bool) []string {
	h := []string{"NAME", "CPU(load1)", "MEMORY%", "DISK-FREE", "TEMP", "THROTTLED", "AGE"}
	if wide {
		h = append(h, "LOAD5", "LOAD15", "CPUS", "MEMORY(avail/total)", "IMAGE-DISK-FREE", "UPTIME", "THROTTLED-FLAGS")
	}
	return h
}

func topDeviceRow(r schema.TopReport, wide bool, now time.Time) []string {
	n := r.Node
	mem := none
	if n.MemoryTotalBytes > 0 {
		used := n.MemoryTotalBytes - min(n.MemoryAvailableBytes, n.MemoryTotalBytes)
		mem = fmt.Sprintf("%d%%", (used*100+n.MemoryTotalBytes/2)/n.MemoryTotalBytes)
	}
	row := []string{r.Device, strconv.FormatFloat(n.Load1, 'f', 2, 64), mem, diskFree(n.StateDisk), temperature(n.TemperatureCelsius), throttled(n), figuresAge(r, now)}
	if !wide {
		return row
	}
	cpus, memBytes, uptime := none, none, none
	if n.CPUs > 0 {
		cpus = strconv.Itoa(n.CPUs)
	}
	if n.MemoryTotalBytes > 0 {
		memBytes = size(n.MemoryAvailableBytes) + "/" + size(n.MemoryTotalBytes)
	}
	if n.UptimeSeconds > 0 {
		uptime = printers.HumanDuration(time.Duration(n.UptimeSeconds) * time.Second)
	}
	flags := none
	if len(n.ThrottledFlags) > 0 {
		flags = strings.Join(n.ThrottledFlags, ",")
	}
	return append(row, strconv.FormatFloat(n.Load5, 'f', 2, 64), strconv.FormatFloat(n.Load15, 'f', 2, 64), cpus, memBytes, diskFree(n.ImageDisk), uptime, flags)
}

func topPodHeaders(wide bool) []string {
	h := []string{"DEVICE", "POD", "CONTAINER", "CPU(cores)", "MEMORY(bytes)", "LIMIT", "AGE"}
	if wide {
		h = append(h, "MEMORY(in use)", "CPU-TIME", "PIDS")
	}
	return h
}

func topPodRow(r schema.TopReport, c schema.ContainerMetrics, wide bool, now time.Time) []string {
	cpu := unknownValue
	if c.CPUMillicores != nil {
		cpu = strconv.FormatInt(*c.CPUMillicores, 10) + "m"
	}
	limit := none
	if c.MemoryLimitBytes > 0 {
		limit = quantity(c.MemoryLimitBytes)
	}
	row := []string{r.Device, c.Pod, c.Container, cpu, quantity(c.MemoryWorkingSetBytes), limit, figuresAge(r, now)}
	if !wide {
		return row
	}
	return append(row, quantity(c.MemoryBytes), time.Duration(c.CPUUsageNanos).Round(time.Millisecond).String(), strconv.FormatUint(c.PIDs, 10))
}

const (
	none         = "<none>"
	unknownValue = "<unknown>"
)

// figuresAge is how old a report's figures are, marked when stale.
func figuresAge(r schema.TopReport, now time.Time) string {
	age := printers.Age(&r.Time, now)
	if r.Stale {
		age += " (stale)"
	}
	return age
}

// quantity writes bytes as kubectl top does: whole Ki, Mi or Gi ("23Mi").
func quantity(n uint64) string {
	const ki = 1024
	switch {
	case n >= 10*ki*ki*ki:
		return strconv.FormatUint((n+ki*ki*ki/2)/(ki*ki*ki), 10) + "Gi"
	case n >= ki*ki:
		return strconv.FormatUint((n+ki*ki/2)/(ki*ki), 10) + "Mi"
	case n >= ki:
		return strconv.FormatUint((n+ki/2)/ki, 10) + "Ki"
	}
	return strconv.FormatUint(n, 10)
}

// size writes a disk or device memory size: Gi with one decimal from
// 1Gi on ("7.5Gi", "32Gi"), else as quantity.
func size(n uint64) string {
	const gi = 1 << 30
	if n < gi {
		return quantity(n)
	}
	return strings.TrimSuffix(strconv.FormatFloat(float64(n)/gi, 'f', 1, 64), ".0") + "Gi"
}

func diskFree(d *schema.DiskMetrics) string {
	if d == nil || d.TotalBytes == 0 {
		return none
	}
	return fmt.Sprintf("%s (%d%%)", size(d.FreeBytes), d.FreeBytes*100/d.TotalBytes)
}

func temperature(t *float64) string {
	if t == nil {
		return none
	}
	return strconv.FormatFloat(*t, 'f', 1, 64) + "°C"
}

// throttled sums a Raspberry Pi's throttling flags: yes (now), earlier
// (since boot), no; <none> where the device has no such figure.
func throttled(n schema.NodeMetrics) string {
	if n.Throttled == "" {
		return none
	}
	now, earlier := false, false
	for _, f := range n.ThrottledFlags {
		now = now || strings.HasSuffix(f, "-now")
		earlier = earlier || strings.HasSuffix(f, "-occurred")
	}
	switch {
	case now:
		return "yes"
	case earlier:
		return "earlier"
	}
	return "no"
}
