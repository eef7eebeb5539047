package printers

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// describer writes "Key:  value" lines, aligned per indentation block, the
// way kubectl describe does.
type describer struct {
	tw  *tabwriter.Writer
	now time.Time
}

func newDescriber(w io.Writer, now time.Time) *describer {
	return &describer{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0), now: now}
}

// line writes one line at an indentation level; with args, format is a
// "Key:\tvalue" pattern.
func (d *describer) line(level int, format string, args ...any) {
	fmt.Fprintf(d.tw, strings.Repeat("  ", level)+format+"\n", args...)
}

func (d *describer) flush() error { return d.tw.Flush() }

func (d *describer) labels(level int, key string, m map[string]string) {
	if len(m) == 0 {
		d.line(level, "%s:\t%s", key, none)
		return
	}
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i == 0 {
			d.line(level, "%s:\t%s=%s", key, k, m[k])
		} else {
			d.line(level, "\t%s=%s", k, m[k])
		}
	}
}

func (d *describer) time(t *time.Time) string {
	if t == nil || t.IsZero() {
		return unknown
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.RFC1123Z), HumanDuration(d.now.Sub(*t)))
}

func (d *describer) meta(m *schema.ObjectMeta) {
	d.line(0, "Name:\t%s", m.Name)
	d.labels(0, "Labels", m.Labels)
	if len(m.Annotations) > 0 {
		d.labels(0, "Annotations", m.Annotations)
	}
	d.line(0, "Created:\t%s", d.time(m.CreationTimestamp))
	d.line(0, "UID:\t%s", orNone(m.UID))
	d.line(0, "Generation:\t%d", m.Generation)
	d.line(0, "Resource Version:\t%s", orNone(m.ResourceVersion))
}

// DescribeDeployment writes the description of a deployment. devices are
// the devices its selector matches (nil if unknown): their pod named after
// the deployment is listed.
func DescribeDeployment(w io.Writer, dep *schema.Deployment, devices []schema.Device, now time.Time) error {
	d := newDescriber(w, now)
	d.meta(&dep.Metadata)
	if dep.Spec.Selector.Empty() {
		d.line(0, "Selector:\t<none> (every device)")
	} else {
		d.line(0, "Selector:\t%s", dep.Spec.Selector)
	}
	s := dep.Spec.Strategy
	switch {
	case s.Type == schema.StrategyRollingUpdate:
		mu := "25%"
		if s.RollingUpdate != nil && s.RollingUpdate.MaxUnavailable != "" {
			mu = s.RollingUpdate.MaxUnavailable
		}
		d.line(0, "Strategy:\t%s (max unavailable %s)", s.Type, mu)
	case s.Type == schema.StrategyStaged && s.Staged != nil:
		d.line(0, "Strategy:\t%s (%s)", s.Type, StagedSummary(s.Staged))
	default:
		d.line(0, "Strategy:\t%s", orNone(s.Type))
	}
	if dep.Spec.Paused {
		d.line(0, "Paused:\ttrue (no device moves to a new template: fleet rollout resume deployment/%s)", dep.Metadata.Name)
	} else {
		d.line(0, "Paused:\tfalse")
	}
	d.line(0, "Pod Template:")
	if dep.Spec.Template.Metadata != nil {
		d.labels(1, "Labels", dep.Spec.Template.Metadata.Labels)
		if a := dep.Spec.Template.Metadata.Annotations; len(a) > 0 {
			d.labels(1, "Annotations", a)
		}
	} else {
		d.labels(1, "Labels", nil)
	}
	d.podSpec(1, &dep.Spec.Template.Spec)
	d.line(0, "Status:")
	if st := dep.Status; st == nil {
		d.line(1, "<not yet reconciled>")
	} else {
		if st.Revision > 0 {
			d.line(1, "Revision:\t%d (fleet rollout history deployment/%s)", st.Revision, dep.Metadata.Name)
		}
		d.line(1, "Observed Generation:\t%d", st.ObservedGeneration)
		d.line(1, "Devices:\t%d targeted, %d updated, %d ready, %d pending, %d failed", st.Targeted, st.Updated, st.Ready, st.Pending, st.Failed)
		if r := st.Rollout; r != nil {
			d.rollout(dep.Metadata.Name, r)
		}
		for _, c := range st.Conditions {
			d.line(1, "Condition %s:\t%s (%s) %s", c.Type, c.Status, c.Reason, oneLine(c.Message))
		}
	}
	if st := dep.Status; st != nil && st.Rollout != nil && len(st.Rollout.Events) > 0 {
		d.line(0, "Rollout Events:")
		if err := d.flush(); err != nil {
			return err
		}
		rows := make([][]string, 0, len(st.Rollout.Events))
		for _, ev := range st.Rollout.Events {
			rows = append(rows, []string{ev.Type, ev.Reason, Age(&ev.Time, now), oneLine(ev.Message)})
		}
		if err := writeIndentedTable(w, "  ", []string{"TYPE", "REASON", "AGE", "MESSAGE"}, rows); err != nil {
			return err
		}
	}
	if devices != nil {
		d.line(0, "Devices:")
		if err := d.flush(); err != nil {
			return err
		}
		if len(devices) == 0 {
			d.line(1, "<none match the selector>")
			return d.flush()
		}
		rows := make([][]string, 0, len(devices))
		for i := range devices {
			rows = append(rows, deploymentDeviceRow(dep.Metadata.Name, &devices[i], now))
		}
		return writeIndentedTable(w, "  ", []string{"DEVICE", "ONLINE", "PHASE", "READY", "RESTARTS", "MESSAGE"}, rows)
	}
	return d.flush()
}

// rollout describes a Staged rollout: its revision, step, counts, and
// what it waits for or why it stopped.
func (d *describer) rollout(name string, r *schema.RolloutStatus) {
	d.line(1, "Rollout:")
	good := "none: a first rollout"
	if r.LastGoodRevision > 0 {
		good = strconv.FormatInt(r.LastGoodRevision, 10)
	}
	d.line(2, "Revision:\t%d (last good %s)", r.Revision, good)
	d.line(2, "Phase:\t%s, step %d of %d", r.Phase, r.Step, r.Steps)
	d.line(2, "Devices:\t%d of %d updated, %d ready, %d failed, %d pending", r.Updated, r.Targeted, r.Ready, r.Failed, r.Pending)
	if r.Waiting != "" {
		until := ""
		if !r.WaitUntil.IsZero() {
			until = " (until " + d.time(&r.WaitUntil) + ")"
		}
		d.line(2, "Waiting:\t%s%s", oneLine(r.Waiting), until)
	}
	if r.Reason != "" {
		d.line(2, "Reason:\t%s", oneLine(r.Reason))
	}
	if rb := r.RolledBackFrom; rb != nil {
		d.line(2, "Rolled Back From:\trevision %d at step %d of %d, to the template of revision %d (fleet rollout history deployment/%s --revision %d says why)",
			rb.Revision, rb.Step, rb.Steps, rb.ToRevision, name, rb.Revision)
	}
}

// StagedSummary says a Staged strategy in one line: "steps 1, 10% pause
// 10m, 100%; failureThreshold 5%, autoRollback, minReadySeconds 30,
// progressDeadlineSeconds 600".
func StagedSummary(s *schema.Staged) string {
	steps := make([]string, 0, len(s.Steps))
	for _, st := range s.Steps {
		var one string
		switch {
		case st.Devices != nil:
			one = strconv.Itoa(int(*st.Devices))
		case st.Percent != nil:
			one = strconv.Itoa(int(*st.Percent)) + "%"
		}
		if st.Pause != "" {
			one += " pause " + st.Pause
		}
		steps = append(steps, one)
	}
	out := "steps " + strings.Join(steps, ", ") + "; failureThreshold " + cmp.Or(string(s.FailureThreshold), "0")
	if s.AutoRollback {
		out += ", autoRollback"
	}
	if s.MinReadySeconds > 0 {
		out += fmt.Sprintf(", minReadySeconds %d", s.MinReadySeconds)
	}
	return out + fmt.Sprintf(", progressDeadlineSeconds %d", int(s.ProgressDeadline()/time.Second))
}

func deploymentDeviceRow(pod string, dev *schema.Device, now time.Time) []string {
	row := []string{dev.Metadata.Name, "false", "<not reported>", "false", "0", ""}
	st := dev.Status
	if st == nil {
		return row
	}
	row[1] = strconv.FormatBool(st.Online)
	for _, p := range st.Pods {
		if p.Name != pod {
			continue
		}
		row[2], row[3], row[4], row[5] = string(p.Phase), strconv.FormatBool(p.Ready), strconv.Itoa(int(p.Restarts)), oneLine(p.Message)
		if !st.Online || st.Stale {
			// As get pods says it: Unknown, and what the last report said.
			dp := DevicePod{Device: dev.Metadata.Name, Presence: Presence(st), LastReport: st.LastSeen, PodStatus: p}
			row[2], row[3] = string(schema.PhaseUnknown), "false"
			row[5] = oneLine(strings.TrimSuffix(Unreachable(dp, now)+"; "+p.Message, "; "))
		}
	}
	return row
}

func writeIndentedTable(w io.Writer, indent string, headers []string, rows [][]string) error {
	var b strings.Builder
	if err := WriteTable(&b, headers, rows); err != nil {
		return err
	}
	lines := strings.SplitAfter(strings.TrimSuffix(b.String(), "\n"), "\n")
	for _, l := range lines {
		if _, err := io.WriteString(w, indent+strings.TrimRight(l, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func (d *describer) podSpec(level int, p *schema.PodSpec) {
	d.line(level, "Restart Policy:\t%s", orNone(string(p.RestartPolicy)))
	host := true
	if p.HostNetwork != nil {
		host = *p.HostNetwork
	}
	d.line(level, "Host Network:\t%t", host)
	if len(p.ImagePullSecrets) > 0 {
		names := make([]string, len(p.ImagePullSecrets))
		for i, r := range p.ImagePullSecrets {
			names[i] = r.Name
		}
		d.line(level, "Image Pull Secrets:\t%s", strings.Join(names, ", "))
	}
	d.line(level, "Containers:")
	for _, c := range p.Containers {
		d.line(level+1, "%s:", c.Name)
		l := level + 2
		d.line(l, "Image:\t%s", c.Image)
		d.line(l, "Image Pull Policy:\t%s", orNone(string(c.ImagePullPolicy)))
		if len(c.Command) > 0 {
			d.line(l, "Command:\t%s", quoteArgs(c.Command))
		}
		if len(c.Args) > 0 {
			d.line(l, "Args:\t%s", quoteArgs(c.Args))
		}
		if c.WorkingDir != "" {
			d.line(l, "Working Dir:\t%s", c.WorkingDir)
		}
		lim := c.Resources.Limits
		if lim.Memory == "" && lim.CPU == "" {
			d.line(l, "Limits:\t%s", none)
		} else {
			d.line(l, "Limits:")
			if lim.CPU != "" {
				d.line(l+1, "cpu:\t%s", lim.CPU)
			}
			if lim.Memory != "" {
				d.line(l+1, "memory:\t%s", lim.Memory)
			}
		}
		if len(c.EnvFrom) > 0 {
			d.line(l, "Environment Variables from:")
			for _, f := range c.EnvFrom {
				d.line(l+1, "%s", envFromSource(f))
			}
		}
		if len(c.Env) == 0 {
			d.line(l, "Environment:\t%s", none)
		} else {
			d.line(l, "Environment:")
			for _, e := range c.Env {
				d.line(l+1, "%s:\t%s", e.Name, envValue(e))
			}
		}
		if len(c.Mounts) == 0 {
			d.line(l, "Mounts:\t%s", none)
		} else {
			d.line(l, "Mounts:")
			for _, m := range c.Mounts {
				mode := "rw"
				if m.ReadOnly {
					mode = "ro"
				}
				d.line(l+1, "%s from %s (%s)", m.MountPath, m.HostPath, mode)
			}
		}
	}
}

// envValue describes a variable's value as kubectl does: the value, or
// where it comes from (never a Secret's value: the hub does not send it).
func envValue(e schema.EnvVar) string {
	if e.ValueFrom == nil {
		return e.Value
	}
	switch r := e.ValueFrom; {
	case r.ConfigMapKeyRef != nil:
		return fmt.Sprintf("<set to the key '%s' of config map '%s'>%s", r.ConfigMapKeyRef.Key, r.ConfigMapKeyRef.Name, optional(r.ConfigMapKeyRef.Optional))
	case r.SecretKeyRef != nil:
		return fmt.Sprintf("<set to the key '%s' in secret '%s'>%s", r.SecretKeyRef.Key, r.SecretKeyRef.Name, optional(r.SecretKeyRef.Optional))
	}
	return none
}

// envFromSource describes one envFrom entry: "gw  ConfigMap  Optional: false".
func envFromSource(f schema.EnvFromSource) string {
	var name, kind string
	var opt *bool
	switch {
	case f.ConfigMapRef != nil:
		name, kind, opt = f.ConfigMapRef.Name, schema.KindConfigMap, f.ConfigMapRef.Optional
	case f.SecretRef != nil:
		name, kind, opt = f.SecretRef.Name, schema.KindSecret, f.SecretRef.Optional
	}
	out := name + "  " + kind + optional(opt)
	if f.Prefix != "" {
		out += "  Prefix: " + f.Prefix
	}
	return out
}

func optional(o *bool) string {
	return fmt.Sprintf("  Optional: %t", o != nil && *o)
}

// DescribeConfigMap writes the description of a ConfigMap: its metadata
// and its data, text values in full and binary ones by size.
func DescribeConfigMap(w io.Writer, cm *schema.ConfigMap, now time.Time) error {
	d := newDescriber(w, now)
	d.meta(&cm.Metadata)
	if len(cm.Data) == 0 {
		d.line(0, "Data:\t%s", none)
	} else {
		d.line(0, "Data:")
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			v := cm.Data[k]
			if !strings.ContainsAny(v, "\n\t") && len(v) <= 60 {
				d.line(1, "%s:\t%s", k, v)
				continue
			}
			// A file: its lines below the key, indented.
			d.line(1, "%s:", k)
			for line := range strings.SplitSeq(strings.TrimSuffix(v, "\n"), "\n") {
				d.line(2, "%s", strings.ReplaceAll(line, "\t", "    "))
			}
		}
	}
	if len(cm.BinaryData) > 0 {
		d.line(0, "Binary Data:")
		for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
			d.line(1, "%s:\t%d bytes", k, len(cm.BinaryData[k]))
		}
	}
	return d.flush()
}

// DescribeSecret writes the description of a Secret: its metadata, its
// type, and its keys with the size of each value. The values are never
// shown: the hub does not send them.
func DescribeSecret(w io.Writer, s *schema.Secret, now time.Time) error {
	d := newDescriber(w, now)
	d.meta(&s.Metadata)
	d.line(0, "Type:\t%s", orNone(s.Type))
	keys := SecretKeys(s)
	if len(keys) == 0 {
		d.line(0, "Data:\t%s", none)
		return d.flush()
	}
	d.line(0, "Data:")
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		d.line(1, "%s:\t%d bytes", k, keys[k])
	}
	return d.flush()
}

// quoteArgs joins a command line, quoting the words that need it.
func quoteArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

// DescribeDevice writes the description of a device: what the hub knows of
// it, its pods as the agent reported them, the deployments (if not nil)
// whose selector matches it and its recent events (if not nil), as
// kubectl describe ends with them.
func DescribeDevice(w io.Writer, dev *schema.Device, deployments []schema.Deployment, events []schema.Event, now time.Time) error {
	if err := describeDevice(w, dev, deployments, now); err != nil {
		return err
	}
	if events == nil {
		return nil
	}
	if len(events) == 0 {
		_, err := io.WriteString(w, "Events:  <none>\n")
		return err
	}
	if _, err := io.WriteString(w, "Events:\n"); err != nil {
		return err
	}
	rows := make([][]string, 0, len(events))
	for _, ev := range events {
		from := "agent"
		switch {
		case ev.Pod != "" && ev.Container != "":
			from = ev.Pod + "/" + ev.Container
		case ev.Pod != "":
			from = ev.Pod
		}
		rows = append(rows, []string{ev.Type, ev.Reason, Age(&ev.Time, now), from, oneLine(ev.Message)})
	}
	return writeIndentedTable(w, "  ", []string{"TYPE", "REASON", "AGE", "FROM", "MESSAGE"}, rows)
}

func describeDevice(w io.Writer, dev *schema.Device, deployments []schema.Deployment, now time.Time) error {
	d := newDescriber(w, now)
	d.meta(&dev.Metadata)
	if dev.Spec.Description != "" {
		d.line(0, "Description:\t%s", oneLine(dev.Spec.Description))
	}
	st := dev.Status
	d.line(0, "Status:")
	if st == nil {
		d.line(1, "Online:\tfalse")
		d.line(1, "Last Seen:\t%s (the agent has never reported)", never)
	} else {
		d.line(1, "Online:\t%t", st.Online)
		if st.LastSeen == nil {
			d.line(1, "Last Seen:\t%s", never)
		} else {
			d.line(1, "Last Seen:\t%s", d.time(st.LastSeen))
		}
		d.line(1, "Generation:\tobserved %d, desired %d", st.ObservedGeneration, st.DesiredGeneration)
		conv := strconv.FormatBool(st.Converged)
		if st.Stale {
			conv += " (stale: no status heard recently)"
		}
		d.line(1, "Converged:\t%s", conv)
		if st.Message != "" {
			d.line(1, "Message:\t%s", oneLine(st.Message))
		}
		if a := st.Agent; a != nil {
			d.line(1, "Agent:\t%s (%s/%s)", orNone(a.Version), orNone(a.OS), orNone(a.Arch))
		}
		if n := st.Node; n != nil {
			if n.Hostname != "" {
				d.line(1, "Hostname:\t%s", n.Hostname)
			}
			if n.MemoryTotalBytes > 0 {
				d.line(1, "Memory:\t%s available of %s", bytesIEC(n.MemoryAvailBytes), bytesIEC(n.MemoryTotalBytes))
			}
			if n.DiskTotalBytes > 0 {
				d.line(1, "Disk:\t%s free of %s", bytesIEC(n.DiskFreeBytes), bytesIEC(n.DiskTotalBytes))
			}
			if n.UptimeSeconds > 0 {
				d.line(1, "Uptime:\t%s", HumanDuration(time.Duration(n.UptimeSeconds)*time.Second))
			}
		}
	}
	if deployments != nil {
		var names []string
		for _, dep := range deployments {
			if dep.Spec.Selector.Matches(dev.Metadata.Labels) {
				names = append(names, dep.Metadata.Name)
			}
		}
		d.line(0, "Deployments:\t%s", orNone(strings.Join(names, ", ")))
	}
	if st == nil || len(st.Pods) == 0 {
		d.line(0, "Pods:\t%s", none)
		return d.flush()
	}
	d.line(0, "Pods:")
	if err := d.flush(); err != nil {
		return err
	}
	for _, p := range st.Pods {
		d.line(1, "%s:", p.Name)
		d.line(2, "Phase:\t%s", p.Phase)
		d.line(2, "Ready:\t%t", p.Ready)
		d.line(2, "Restarts:\t%d", p.Restarts)
		if p.Message != "" {
			d.line(2, "Message:\t%s", oneLine(p.Message))
		}
		if p.Hash != "" {
			d.line(2, "Spec Hash:\t%s", p.Hash)
		}
		if fr := p.FailedRevision; fr != nil {
			d.line(2, "Failed Revision:\t%s (the device went back to the spec hash above)", FailedRevisionText(fr))
		}
		if len(p.Containers) == 0 {
			continue
		}
		d.line(2, "Containers:")
		for _, c := range p.Containers {
			state := c.State
			if c.State == schema.ContainerExited {
				state += fmt.Sprintf(" (exit code %d)", c.ExitCode)
			}
			if c.Reason != "" {
				state += ": " + oneLine(c.Reason)
			}
			d.line(3, "%s:", c.Name)
			d.line(4, "Image:\t%s", c.Image)
			d.line(4, "State:\t%s", state)
			if c.StartedAt != nil {
				d.line(4, "Started:\t%s", d.time(c.StartedAt))
			}
			d.line(4, "Restarts:\t%d", c.Restarts)
		}
	}
	return d.flush()
}

func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
