package printers

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fleetmq/fleet/schema"
)

// Placeholders in table cells, as kubectl prints them.
const (
	none    = "<none>"
	never   = "<never>"
	unknown = "<unknown>"
)

// Table layout, the same as kubectl's: columns at least 6 wide, 3 spaces
// between them.
const (
	minColumnWidth = 6
	columnPadding  = 3
)

// Headers of the tables.
var (
	deploymentHeaders     = []string{"NAME", "TARGETED", "UPDATED", "READY", "PENDING", "GENERATION", "AGE"}
	deploymentWideHeaders = []string{"SELECTOR", "IMAGES", "STRATEGY"}
	deviceHeaders         = []string{"NAME", "ONLINE", "LAST-SEEN", "GENERATION", "PODS", "CONVERGED", "AGE"}
	deviceWideHeaders     = []string{"LABELS", "ARCH", "AGENT"}
	configMapHeaders      = []string{"NAME", "DATA", "AGE"}
	secretHeaders         = []string{"NAME", "TYPE", "DATA", "AGE"}
	configWideHeaders     = []string{"KEYS", "LABELS"}
	agentRolloutHeaders   = []string{"NAME", "VERSION", "PHASE", "STEP", "UPDATED", "FAILED", "PENDING", "AGE"}
	agentRolloutWide      = []string{"SELECTOR", "STRATEGY", "LAST-GOOD", "IMAGE"}
)

// Headers returns the column headers of a table of objects of kind
// (schema.KindDeployment, schema.KindDevice…).
func Headers(objectKind string, wide bool) []string {
	var h, w []string
	switch objectKind {
	case schema.KindDeployment:
		h, w = deploymentHeaders, deploymentWideHeaders
	case schema.KindDevice:
		h, w = deviceHeaders, deviceWideHeaders
	case schema.KindConfigMap:
		h, w = configMapHeaders, configWideHeaders
	case schema.KindSecret:
		h, w = secretHeaders, configWideHeaders
	case schema.KindAgentRollout:
		h, w = agentRolloutHeaders, agentRolloutWide
	default:
		return []string{"KIND", "NAME"}
	}
	if wide {
		return slices.Concat(h, w)
	}
	return slices.Clone(h)
}

// Row returns the table cells of one object, at time now.
func Row(obj schema.Object, wide bool, now time.Time) []string {
	switch o := obj.(type) {
	case *schema.Deployment:
		return deploymentRow(o, wide, now)
	case *schema.Device:
		return deviceRow(o, wide, now)
	case *schema.ConfigMap:
		return configMapRow(o, wide, now)
	case *schema.Secret:
		return secretRow(o, wide, now)
	case *schema.AgentRollout:
		return agentRolloutRow(o, wide, now)
	}
	return []string{obj.GetTypeMeta().Kind, obj.GetMetadata().Name}
}

func configMapRow(c *schema.ConfigMap, wide bool, now time.Time) []string {
	keys := ConfigMapKeys(c)
	row := []string{c.Metadata.Name, strconv.Itoa(len(keys)), Age(c.Metadata.CreationTimestamp, now)}
	if !wide {
		return row
	}
	return append(row, orNone(strings.Join(keys, ",")), orNone(Labels(c.Metadata.Labels)))
}

func secretRow(s *schema.Secret, wide bool, now time.Time) []string {
	sizes := SecretKeys(s)
	row := []string{s.Metadata.Name, orNone(s.Type), strconv.Itoa(len(sizes)), Age(s.Metadata.CreationTimestamp, now)}
	if !wide {
		return row
	}
	return append(row, orNone(strings.Join(slices.Sorted(maps.Keys(sizes)), ",")), orNone(Labels(s.Metadata.Labels)))
}

// ConfigMapKeys returns the keys of a ConfigMap, data and binaryData,
// sorted.
func ConfigMapKeys(c *schema.ConfigMap) []string {
	keys := slices.Collect(maps.Keys(c.Data))
	for k := range c.BinaryData {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// SecretKeys returns the keys of a Secret and the size of each value, as
// the hub answers them (Keys); for a Secret read from a manifest, from
// its data and stringData. Never a value.
func SecretKeys(s *schema.Secret) map[string]int {
	if s.Keys != nil {
		return s.Keys
	}
	out := map[string]int{}
	for k, v := range s.Data {
		out[k] = len(v)
	}
	for k, v := range s.StringData {
		out[k] = len(v)
	}
	return out
}

func deploymentRow(d *schema.Deployment, wide bool, now time.Time) []string {
	var st schema.DeploymentStatus
	if d.Status != nil {
		st = *d.Status
	}
	row := []string{
		d.Metadata.Name,
		strconv.Itoa(st.Targeted),
		strconv.Itoa(st.Updated),
		strconv.Itoa(st.Ready),
		strconv.Itoa(st.Pending),
		strconv.FormatInt(d.Metadata.Generation, 10),
		Age(d.Metadata.CreationTimestamp, now),
	}
	if !wide {
		return row
	}
	var images []string
	for _, c := range d.Spec.Template.Spec.Containers {
		images = append(images, c.Image)
	}
	return append(row, orNone(d.Spec.Selector.String()), orNone(strings.Join(images, ",")), orNone(strategy(d.Spec.Strategy)))
}

func deviceRow(d *schema.Device, wide bool, now time.Time) []string {
	st := d.Status
	if st == nil {
		st = &schema.DeviceObservedInfo{}
	}
	ready := 0
	for _, p := range st.Pods {
		if p.Ready {
			ready++
		}
	}
	lastSeen := never
	if st.LastSeen != nil {
		lastSeen = HumanDuration(now.Sub(*st.LastSeen))
	}
	row := []string{
		d.Metadata.Name,
		strconv.FormatBool(st.Online),
		lastSeen,
		fmt.Sprintf("%d/%d", st.ObservedGeneration, st.DesiredGeneration),
		fmt.Sprintf("%d/%d", ready, len(st.Pods)),
		strconv.FormatBool(st.Converged),
		Age(d.Metadata.CreationTimestamp, now),
	}
	if !wide {
		return row
	}
	arch, agent := d.Metadata.Labels[schema.LabelArch], ""
	if st.Agent != nil {
		if st.Agent.Arch != "" {
			arch = st.Agent.Arch
		}
		agent = st.Agent.Version
	}
	return append(row, orNone(Labels(d.Metadata.Labels)), orNone(arch), orNone(agent))
}

func strategy(s schema.Strategy) string {
	if s.Type == schema.StrategyRollingUpdate && s.RollingUpdate != nil && s.RollingUpdate.MaxUnavailable != "" {
		return s.Type + "(" + s.RollingUpdate.MaxUnavailable + ")"
	}
	return s.Type
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// Labels formats labels as sorted k=v pairs joined by commas.
func Labels(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// Age is the time since t in kubectl's short form, or <unknown>.
func Age(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return unknown
	}
	return HumanDuration(now.Sub(*t))
}

// HumanDuration formats d the way kubectl prints ages: two significant
// units at most, coarser as d grows (90s, 5m30s, 45m, 5h30m, 20h, 3d5h,
// 300d, 2y100d).
func HumanDuration(d time.Duration) string {
	secs := int64(d / time.Second)
	switch {
	case secs < -1:
		return "<invalid>"
	case secs < 0:
		return "0s"
	case secs < 120:
		return fmt.Sprintf("%ds", secs)
	}
	mins := secs / 60
	switch {
	case mins < 10:
		return twoUnits(mins, "m", secs%60, "s")
	case mins < 180:
		return fmt.Sprintf("%dm", mins)
	}
	hours := mins / 60
	switch {
	case hours < 8:
		return twoUnits(hours, "h", mins%60, "m")
	case hours < 48:
		return fmt.Sprintf("%dh", hours)
	case hours < 24*8:
		return twoUnits(hours/24, "d", hours%24, "h")
	case hours < 24*365*2:
		return fmt.Sprintf("%dd", hours/24)
	case hours < 24*365*8:
		return twoUnits(hours/24/365, "y", hours/24%365, "d")
	}
	return fmt.Sprintf("%dy", hours/24/365)
}

func twoUnits(a int64, ua string, b int64, ub string) string {
	if b == 0 {
		return fmt.Sprintf("%d%s", a, ua)
	}
	return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
}

// WriteTable writes headers (unless nil) and rows aligned with
// text/tabwriter.
func WriteTable(w io.Writer, headers []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, minColumnWidth, 4, columnPadding, ' ', 0)
	if headers != nil {
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// StreamTable prints rows one at a time, as a watch delivers them, aligned
// like WriteTable. Column widths are fixed by the first batch of rows and
// only grow after it, so earlier lines stay where they are.
type StreamTable struct {
	w       io.Writer
	headers []string
	widths  []int
	started bool
}

// NewStreamTable returns a table that prints headers (unless nil) before
// the first batch.
func NewStreamTable(w io.Writer, headers []string) *StreamTable {
	return &StreamTable{w: w, headers: headers}
}

// Write prints a batch of rows (one row per watch event; the whole list at
// the start).
func (t *StreamTable) Write(rows ...[]string) error {
	all := rows
	if !t.started && t.headers != nil {
		all = append([][]string{t.headers}, rows...)
	}
	for _, r := range all {
		for i, c := range r[:max(len(r)-1, 0)] {
			w := max(utf8.RuneCountInString(c)+columnPadding, minColumnWidth)
			if i >= len(t.widths) {
				t.widths = append(t.widths, w)
			} else if w > t.widths[i] {
				t.widths[i] = w
			}
		}
	}
	t.started = true
	var b strings.Builder
	for _, r := range all {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(c)))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// agentRolloutRow is an AgentRollout's row: its version and its waves, as
// the hub last planned them ("<unknown>" before it did).
func agentRolloutRow(a *schema.AgentRollout, wide bool, now time.Time) []string {
	phase, step, updated, failed, pending, lastGood := "<unknown>", "-", "-", "-", "-", ""
	if st := a.Status; st != nil {
		lastGood = st.LastGoodVersion
		if r := st.Rollout; r != nil {
			phase, step = string(r.Phase), fmt.Sprintf("%d/%d", r.Step, r.Steps)
			updated, failed, pending = fmt.Sprintf("%d/%d", r.Updated, r.Targeted), strconv.Itoa(r.Failed), strconv.Itoa(r.Pending)
		}
	}
	row := []string{a.Metadata.Name, a.Spec.Version, phase, step, updated, failed, pending, Age(a.Metadata.CreationTimestamp, now)}
	if !wide {
		return row
	}
	return append(row, orNone(a.Spec.Selector.String()), orNone(strategy(a.Spec.Strategy)), orNone(lastGood), orNone(a.Spec.Image))
}
