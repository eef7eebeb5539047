package printers

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// KindPodList is the kind of `fleet get pods -o json|yaml`.
const KindPodList = "PodList"

// DevicePod is one pod as its device last reported it: the items of
// `fleet get pods -o json|yaml`. The hub keeps pods inside each device's
// status; the CLI lists them from there, so there is no pod resource in
// the API.
type DevicePod struct {
	Device string `json:"device"`
	// Reachable: the device is online and its last status is fresh. When
	// it is not, the pod is shown as Unknown: it is what the device last
	// said, not what runs now.
	Reachable bool `json:"reachable"`
	// Presence is the device's: online, offline (its session ended, or
	// it said so), stale (connected but silent for longer than the
	// hub's --stale-after) or unknown (it has not reported).
	Presence string `json:"presence,omitempty"`
	// LastReport is when the hub last heard from the device: the time of
	// the report the pod's state comes from, or a later one.
	LastReport *time.Time `json:"lastReport,omitempty"`
	// Deleted is set only by `fleet get pods -w`, for a pod its device no
	// longer reports (or of a deleted device).
	Deleted          bool `json:"deleted,omitempty"`
	schema.PodStatus `json:",inline"`
}

// DevicePodList is what `fleet get pods -o json|yaml` prints.
type DevicePodList struct {
	schema.TypeMeta `json:",inline"`
	Items           []DevicePod `json:"items"`
}

// Headers of the pod table.
var (
	podHeaders     = []string{"DEVICE", "POD", "READY", "STATUS", "RESTARTS", "AGE"}
	podWideHeaders = []string{"IMAGES", "FAILED REVISION", "MESSAGE"}
)

// Device presences, as DevicePod.Presence says them: the dashboard's
// device states.
const (
	PresenceOnline  = "online"
	PresenceOffline = "offline"
	PresenceStale   = "stale"
	PresenceNever   = "unknown"
)

// Presence is the device's presence as its status says it.
func Presence(st *schema.DeviceObservedInfo) string {
	switch {
	case st == nil || st.LastSeen == nil:
		return PresenceNever
	case st.Online && st.Stale:
		return PresenceStale
	case st.Online:
		return PresenceOnline
	}
	return PresenceOffline
}

// PodHeaders returns the column headers of a pod table.
func PodHeaders(wide bool) []string {
	if wide {
		return slices.Concat(podHeaders, podWideHeaders)
	}
	return slices.Clone(podHeaders)
}

// PodsOf returns the pods d last reported, by name. names, if not empty,
// keeps only the pods with those names.
func PodsOf(d *schema.Device, names []string) []DevicePod {
	st := d.Status
	if st == nil {
		return nil
	}
	reachable := st.Online && !st.Stale
	var out []DevicePod
	for _, p := range st.Pods {
		if len(names) > 0 && !slices.Contains(names, p.Name) {
			continue
		}
		out = append(out, DevicePod{Device: d.Metadata.Name, Reachable: reachable, Presence: Presence(st), LastReport: st.LastSeen, PodStatus: p})
	}
	slices.SortFunc(out, func(a, b DevicePod) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// PodName is the name form of a pod: "pod/DEVICE/POD".
func PodName(p DevicePod) string { return "pod/" + p.Device + "/" + p.Name }

// PodStatusText is the STATUS column, in kubectl's manner: the reason of
// the first container that is not running (ErrImagePull,
// CrashLoopBackOff, ContainerCreating, Completed, Error…), else the pod's
// phase; Unknown for a device that is offline or has not reported for too
// long.
func PodStatusText(p DevicePod) string {
	if p.Deleted {
		return "Deleted"
	}
	if !p.Reachable {
		return string(schema.PhaseUnknown)
	}
	return p.StatusText()
}

// PodRow returns the table cells of one pod at time now: READY counts the
// ready containers (running, and passing their readiness probe where the
// agent says; none while the device is unreachable, as Kubernetes counts
// the pods of a node that stopped reporting), AGE is since the earliest
// of them started. Wide, IMAGES are those that run, FAILED REVISION names
// a desired revision the device went back from, and MESSAGE says how old
// the report of an unreachable device is.
func PodRow(p DevicePod, wide bool, now time.Time) []string {
	running := 0
	var started *time.Time
	var images []string
	for _, c := range p.Containers {
		if c.State == schema.ContainerRunning && (c.Ready == nil || *c.Ready) {
			running++
		}
		if c.StartedAt != nil && (started == nil || c.StartedAt.Before(*started)) {
			started = c.StartedAt
		}
		images = append(images, c.Image)
	}
	if !p.Reachable && !p.Deleted {
		running = 0
	}
	row := []string{
		p.Device,
		p.Name,
		fmt.Sprintf("%d/%d", running, len(p.Containers)),
		PodStatusText(p) + heldUpdateText(p),
		fmt.Sprint(p.Restarts),
		Age(started, now),
	}
	if !wide {
		return row
	}
	msg := p.Message
	if !p.Reachable && !p.Deleted {
		msg = strings.TrimSuffix(Unreachable(p, now)+"; "+msg, "; ")
	}
	return append(row, orNone(strings.Join(images, ",")), orNone(FailedRevisionText(p.FailedRevision)), orNone(msg))
}

// Unreachable says why the state of a pod of an unreachable device is
// Unknown, and what it was: "device offline; last report 42s ago:
// Running, 1/1 ready".
func Unreachable(p DevicePod, now time.Time) string {
	why := "device offline"
	if p.Presence == PresenceStale {
		why = "device silent"
	}
	ready := 0
	for _, c := range p.Containers {
		if c.State == schema.ContainerRunning && (c.Ready == nil || *c.Ready) {
			ready++
		}
	}
	phase := p.Phase
	if phase == "" {
		phase = schema.PhaseUnknown
	}
	return fmt.Sprintf("%s; last report %s ago: %s, %d/%d ready", why, Age(p.LastReport, now), phase, ready, len(p.Containers))
}

// FailedRevisionText is the FAILED REVISION cell: "1a2b3c4d
// (CrashLoopBackOff)", or "" for none.
func FailedRevisionText(fr *schema.FailedRevision) string {
	if fr == nil {
		return ""
	}
	h := shortRev(fr.Hash)
	if fr.Reason == "" {
		return h
	}
	return h + " (" + fr.Reason + ")"
}

// PrintPods prints pods: a table, pod/DEVICE/POD lines, or a PodList in
// json and yaml. A table of no pods prints nothing; the caller says "No
// resources found", as kubectl does.
func (p *Printer) PrintPods(pods []DevicePod) error {
	if err := p.Compile(); err != nil {
		return err
	}
	pods = slices.Clone(pods)
	if pods == nil {
		pods = []DevicePod{}
	}
	if err := sortItems(p, pods); err != nil {
		return err
	}
	switch p.Format {
	case JSON:
		return writeJSON(p.Out, podList(pods))
	case YAML:
		return writeYAML(p.Out, podList(pods))
	case JSONPath:
		return p.printJSONPath(podList(pods))
	case Name:
		for _, pod := range pods {
			if _, err := fmt.Fprintln(p.Out, PodName(pod)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(pods) == 0 {
		return nil
	}
	rows := make([][]string, len(pods))
	now := p.now()
	for i, pod := range pods {
		var err error
		if rows[i], err = p.podRow(pod, now); err != nil {
			return err
		}
	}
	return WriteTable(p.Out, p.podHeaders(), rows)
}

// podHeaders are the headers of a pod table: custom columns, or
// PodHeaders; nil with NoHeaders.
func (p *Printer) podHeaders() []string {
	switch {
	case p.NoHeaders:
		return nil
	case p.Format == CustomColumns:
		return p.columnHeaders()
	}
	return PodHeaders(p.wide())
}

// podRow is the table row of a pod: its custom columns, or PodRow.
func (p *Printer) podRow(pod DevicePod, now time.Time) ([]string, error) {
	if p.Format == CustomColumns {
		return p.columnRow(pod)
	}
	return PodRow(pod, p.wide(), now), nil
}

func podList(pods []DevicePod) DevicePodList {
	return DevicePodList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: KindPodList}, Items: pods}
}

// PodWatch prints pods as `fleet get pods -w` follows the devices: all of
// them first, then each pod whose line changed (in json and yaml: whose
// reported state changed). Pods that a device stopped reporting, or of a
// deleted device, are printed once more with the status Deleted.
type PodWatch struct {
	p      *Printer
	names  []string
	last   map[string]string // pod/DEVICE/POD → what was printed
	byDev  map[string][]DevicePod
	stream *StreamTable
}

// NewPodWatch returns a watch printer that keeps only pods named names
// (all of them when empty).
func (p *Printer) NewPodWatch(names []string) *PodWatch {
	return &PodWatch{p: p, names: names, last: map[string]string{}, byDev: map[string][]DevicePod{}}
}

// List prints the pods of every device, the start of a watch, in one
// batch sorted by the printer's SortBy if set. After a relist, only what
// changed is printed.
func (w *PodWatch) List(devices []*schema.Device) error {
	if err := w.p.Compile(); err != nil {
		return err
	}
	now := w.p.now()
	seen := map[string]bool{}
	var out []DevicePod
	for _, d := range devices {
		seen[d.Metadata.Name] = true
		out = append(out, w.changes(d, false, now)...)
	}
	for _, dev := range slices.Sorted(maps.Keys(w.byDev)) {
		if !seen[dev] {
			out = append(out, w.changes(&schema.Device{Metadata: schema.ObjectMeta{Name: dev}}, true, now)...)
		}
	}
	if err := sortItems(w.p, out); err != nil {
		return err
	}
	if err := w.print(out, now); err != nil {
		return err
	}
	if w.stream == nil && w.p.tabular() {
		// No pods yet: the header still tells the watch has started.
		return w.table().Write()
	}
	return nil
}

// Device prints what changed in one device's pods; deleted says the
// device itself is gone.
func (w *PodWatch) Device(d *schema.Device, deleted bool) error {
	if err := w.p.Compile(); err != nil {
		return err
	}
	now := w.p.now()
	return w.print(w.changes(d, deleted, now), now)
}

// changes returns the pods of d to print (those gone as Deleted) and
// records them as printed.
func (w *PodWatch) changes(d *schema.Device, deleted bool, now time.Time) []DevicePod {
	var pods []DevicePod
	if !deleted {
		pods = PodsOf(d, w.names)
	}
	var out []DevicePod
	for _, old := range w.byDev[d.Metadata.Name] {
		if !slices.ContainsFunc(pods, func(p DevicePod) bool { return p.Name == old.Name }) {
			gone := old
			gone.Deleted = true
			out = append(out, gone)
			delete(w.last, PodName(old))
		}
	}
	for _, pod := range pods {
		key := w.key(pod, now)
		if w.last[PodName(pod)] == key {
			continue
		}
		w.last[PodName(pod)] = key
		out = append(out, pod)
	}
	if len(pods) == 0 {
		delete(w.byDev, d.Metadata.Name)
	} else {
		w.byDev[d.Metadata.Name] = pods
	}
	return out
}

// key is what, once printed, is not printed again: the line without its
// ages (the pod's, and that of an unreachable device's last report), or
// the pod's state.
func (w *PodWatch) key(pod DevicePod, now time.Time) string {
	switch w.p.Format {
	case Table, Wide:
		if pod.LastReport != nil {
			now = *pod.LastReport // the report's age reads 0s: it grows, nothing changed
		}
		row := PodRow(pod, w.p.wide(), now)
		row[5] = ""
		return strings.Join(row, "\x00")
	}
	b, _ := json.Marshal(pod)
	return string(b)
}

func (w *PodWatch) print(pods []DevicePod, now time.Time) error {
	switch w.p.Format {
	case JSON, YAML:
		for _, pod := range pods {
			if err := w.p.writeWatchObject(pod); err != nil {
				return err
			}
		}
		return nil
	case JSONPath:
		for _, pod := range pods {
			if err := w.p.printJSONPath(pod); err != nil {
				return err
			}
		}
		return nil
	case Name:
		for _, pod := range pods {
			if _, err := fmt.Fprintln(w.p.Out, PodName(pod)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(pods) == 0 {
		return nil
	}
	rows := make([][]string, len(pods))
	for i, pod := range pods {
		var err error
		if rows[i], err = w.p.podRow(pod, now); err != nil {
			return err
		}
	}
	return w.table().Write(rows...)
}

func (w *PodWatch) table() *StreamTable {
	if w.stream == nil {
		w.stream = NewStreamTable(w.p.Out, w.p.podHeaders())
	}
	return w.stream
}

// writeWatchObject writes one object of a json or yaml watch stream (yaml
// documents separated by ---).
func (p *Printer) writeWatchObject(v any) error {
	if p.Format == JSON {
		return writeJSON(p.Out, v)
	}
	if p.events > 0 {
		if _, err := io.WriteString(p.Out, "---\n"); err != nil {
			return err
		}
	}
	p.events++
	return writeYAML(p.Out, v)
}

// heldUpdateText is what the STATUS cell adds while a reachable device
// holds a new revision back (its update window is closed, or its update
// lock held): " (waiting for window until 2026-12-03T01:00:00+01:00)".
func heldUpdateText(p DevicePod) string {
	u := p.Update
	if u == nil || u.Reason == "" || !p.Reachable || p.Deleted {
		return ""
	}
	switch u.Reason {
	case schema.UpdateReasonWindow:
		// The device's own words carry its local time; the hub keeps
		// times in UTC.
		if _, rest, ok := strings.Cut(u.Message, "waiting for window until "); ok && rest != "" && !strings.ContainsAny(rest, " ;") {
			return " (waiting for window until " + rest + ")"
		}
		if u.Until != nil {
			return " (waiting for window until " + u.Until.Format(time.RFC3339) + ")"
		}
		return " (waiting for window)"
	case schema.UpdateReasonLock:
		return " (waiting for update lock)"
	}
	return ""
}
