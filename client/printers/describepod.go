package printers

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// PodDescription is what the hub knows of one pod on one device, for
// DescribePod.
type PodDescription struct {
	Name   string
	Device *schema.Device
	// Desired: a deployment of the pod's name targets the device.
	Desired bool
	// Status is the pod as the device reported it; nil if it did not.
	Status *schema.PodStatus
	// Crashes are the latest crash report of each container.
	Crashes map[string]schema.CrashReport
	// CrashesForbidden: the credential may not read crash reports.
	CrashesForbidden bool
	// Events are the device's events about the pod.
	Events []schema.Event
}

// DescribePod writes a pod's description: its reported status, each
// container's state and last crash (with its log tail), and its events.
func DescribePod(w io.Writer, p PodDescription, now time.Time) error {
	d := newDescriber(w, now)
	d.line(0, "Name:\t%s", p.Name)
	d.line(0, "Device:\t%s (%s)", p.Device.Metadata.Name, deviceState(p.Device, now))
	if p.Desired {
		d.line(0, "Deployment:\t%s", p.Name)
	} else {
		d.line(0, "Deployment:\t%s (no deployment %s targets this device: the agent removes the pod)", none, p.Name)
	}
	names := describePodStatus(d, p.Device, p.Status)
	for _, c := range slices.Sorted(maps.Keys(p.Crashes)) {
		if !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	if len(names) == 0 {
		d.line(0, "Containers:\t%s", none)
	} else {
		d.line(0, "Containers:")
	}
	for _, name := range names {
		if err := describePodContainer(w, d, p, name); err != nil {
			return err
		}
	}
	if p.CrashesForbidden {
		d.line(0, "Crash Reports:\t<an admin credential is needed to read them>")
	}
	if err := d.flush(); err != nil {
		return err
	}
	return describePodEvents(w, p.Events, now)
}

// describePodStatus writes the pod's reported status and returns the names
// of its containers. Its Status is what `fleet get pods` says; for a
// device that is unreachable it is Unknown, and the lines that follow are
// marked as its last report, with its age. A revision the device went
// back from is written under Failed Revision.
func describePodStatus(d *describer, dev *schema.Device, st *schema.PodStatus) []string {
	if st == nil {
		d.line(0, "Status:\t%s (the device has not reported this pod)", none)
		return nil
	}
	pod := DevicePod{Device: dev.Metadata.Name, PodStatus: *st}
	if ds := dev.Status; ds != nil {
		pod.Reachable, pod.Presence, pod.LastReport = ds.Online && !ds.Stale, Presence(ds), ds.LastSeen
	}
	reported := ""
	if !pod.Reachable {
		d.line(0, "Status:\t%s (%s)", PodStatusText(pod), Unreachable(pod, d.now))
		reported = " (last reported)"
	} else {
		d.line(0, "Status:\t%s", PodStatusText(pod))
	}
	if st.Hash != "" {
		d.line(0, "Revision:\t%s%s", shortRev(st.Hash), reported)
	}
	d.line(0, "Phase:\t%s%s", st.Phase, reported)
	d.line(0, "Ready:\t%t%s", st.Ready, reported)
	d.line(0, "Restarts:\t%d", st.Restarts)
	if st.Message != "" {
		d.line(0, "Message:\t%s", oneLineText(st.Message))
	}
	if fr := st.FailedRevision; fr != nil {
		describeFailedRevision(d, fr)
	}
	var names []string
	for _, c := range st.Containers {
		names = append(names, c.Name)
	}
	return names
}

// describeFailedRevision writes the desired revision the device went back
// from: which container failed, how, and when the device gave it up.
func describeFailedRevision(d *describer, fr *schema.FailedRevision) {
	d.line(0, "Failed Revision:\t%s (the device went back to the revision above)", shortRev(fr.Hash))
	if fr.Container != "" {
		c := fr.Container
		if fr.Image != "" {
			c += " (" + fr.Image + ")"
		}
		d.line(1, "Container:\t%s", c)
	}
	how := orNone(fr.Reason)
	if fr.ExitCode != 0 {
		how += fmt.Sprintf(", exit code %d", fr.ExitCode)
	}
	if fr.Attempts > 0 {
		how += fmt.Sprintf(", %d attempts", fr.Attempts)
	}
	d.line(1, "Reason:\t%s", how)
	if fr.Message != "" {
		d.line(1, "Message:\t%s", oneLineText(fr.Message))
	}
	if fr.Time != nil {
		d.line(1, "Given up:\t%s", describeTime(*fr.Time, d.now))
	}
}

func shortRev(h string) string {
	if len(h) > 8 {
		return h[:8]
	}
	return h
}

// describePodContainer writes one container: its reported state, then its
// last crash, whose log tail goes to w as it is, outside the aligned block.
func describePodContainer(w io.Writer, d *describer, p PodDescription, name string) error {
	d.line(1, "%s:", name)
	var cs *schema.ContainerStatus
	if p.Status != nil {
		for i := range p.Status.Containers {
			if p.Status.Containers[i].Name == name {
				cs = &p.Status.Containers[i]
			}
		}
	}
	if cs == nil {
		d.line(2, "State:\t%s (not reported)", none)
	} else {
		state := cs.State
		if cs.State == schema.ContainerExited {
			state += fmt.Sprintf(" (exit code %d)", cs.ExitCode)
		}
		if cs.Reason != "" {
			state += ": " + oneLineText(cs.Reason)
		}
		d.line(2, "Image:\t%s", cs.Image)
		d.line(2, "State:\t%s", state)
		if cs.Ready != nil {
			d.line(2, "Ready:\t%t", *cs.Ready)
		}
		if cs.StartedAt != nil {
			d.line(2, "Started:\t%s", describeTime(*cs.StartedAt, d.now))
		}
		d.line(2, "Restarts:\t%d", cs.Restarts)
	}
	cr, ok := p.Crashes[name]
	if !ok {
		return nil
	}
	how := cr.Reason
	if cr.ExitCode != nil {
		how = fmt.Sprintf("exited %d", *cr.ExitCode)
		if cr.Reason != "" {
			how += " (" + cr.Reason + ")"
		}
	}
	d.line(2, "Last crash:\t%s at %s", how, describeTime(cr.Time, d.now))
	if err := d.flush(); err != nil {
		return err
	}
	tail := strings.TrimRight(cr.LogTail, "\n")
	if tail == "" {
		fmt.Fprintf(w, "      <no log lines>\n")
		return nil
	}
	for _, l := range strings.Split(tail, "\n") {
		fmt.Fprintf(w, "      %s\n", strings.TrimRight(l, "\r"))
	}
	return nil
}

// describePodEvents writes the pod's events as an indented table.
func describePodEvents(w io.Writer, events []schema.Event, now time.Time) error {
	if len(events) == 0 {
		_, err := io.WriteString(w, "Events:  <none>\n")
		return err
	}
	io.WriteString(w, "Events:\n")
	rows := make([][]string, 0, len(events))
	for _, ev := range events {
		from := ev.Pod
		if ev.Container != "" {
			from += "/" + ev.Container
		}
		rows = append(rows, []string{ev.Type, ev.Reason, Age(&ev.Time, now), from, oneLineText(ev.Message)})
	}
	var b bytes.Buffer
	if err := WriteTable(&b, []string{"TYPE", "REASON", "AGE", "FROM", "MESSAGE"}, rows); err != nil {
		return err
	}
	for _, l := range strings.SplitAfter(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintf(w, "  %s", strings.TrimRight(l, "\n")+"\n")
	}
	return nil
}

// deviceState is "online, last seen 12s ago" or "offline, …".
func deviceState(dev *schema.Device, now time.Time) string {
	st := dev.Status
	if st == nil || st.LastSeen == nil {
		return "offline, never seen"
	}
	on := "offline"
	if st.Online && !st.Stale {
		on = "online"
	}
	return fmt.Sprintf("%s, last seen %s ago", on, Age(st.LastSeen, now))
}

func describeTime(t time.Time, now time.Time) string {
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.RFC1123Z), HumanDuration(now.Sub(t)))
}

// oneLineText joins the lines of s with spaces, for one table cell.
func oneLineText(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
