package dashboard

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/hub/fleetmodel"
	"github.com/fleetmq/fleet/schema"
)

// Device states in a row, from the hub's point of view.
const (
	StateOnline  = "online"  // connected and heard from within --stale-after
	StateStale   = "stale"   // connected, but silent for longer than --stale-after
	StateOffline = "offline" // said offline, or its connection dropped
	StateNever   = "unknown" // never heard from since it was registered
)

// device is what a snapshot keeps of one device.
type device struct {
	name   string
	labels map[string]string
	info   *schema.DeviceObservedInfo
	// desired names the pods of the device's desired state, with their
	// hashes; ds is the desired state it was made from.
	desired map[string]string
	ds      *schema.DesiredState
	state   string
	search  string // lower-case name, labels (k=v), agent version and arch
	sum     uint64 // changes whenever anything the dashboard shows changes
}

// snapshot is the fleet as the model had it at one moment, by name.
type snapshot struct {
	seq     uint64
	at      time.Time
	devices []device // sorted by name
	counts  Counts
}

// Counts sums the devices up.
type Counts struct {
	Devices   int `json:"devices"`
	Online    int `json:"online"`
	Offline   int `json:"offline"`
	Stale     int `json:"stale"`
	Unknown   int `json:"unknown"`
	Converged int `json:"converged"`
}

// modelReader is what the dashboard reads of the fleet model.
type modelReader interface {
	Devices(sel schema.LabelSelector) []fleetmodel.DeviceRef
	Device(name string) (uid string, labels map[string]string, ok bool)
	DeviceInfoJSON(name, uid string) []byte
	Desired(name string) *schema.DesiredState
	DeploymentStatus(name string) (schema.DeploymentStatus, bool)
}

var _ modelReader = (*fleetmodel.Model)(nil)

var seed = maphash.MakeSeed()

// takeSnapshot reads every device of the model. A device whose status
// JSON (cached by the model), uid and labels are those it had in prev
// is taken over from prev without decoding anything: a pass over 10,000
// unchanged devices costs a few milliseconds.
func takeSnapshot(m modelReader, prev *snapshot, seq uint64, now time.Time) (*snapshot, error) {
	refs := m.Devices(schema.LabelSelector{})
	s := &snapshot{seq: seq, at: now, devices: make([]device, 0, len(refs))}
	var old []device // prev's devices from the current name on: both are sorted
	if prev != nil {
		old = prev.devices
	}
	var h, lh maphash.Hash
	h.SetSeed(seed)
	lh.SetSeed(seed)
	var buf [8]byte
	for _, ref := range refs {
		uid, labels, ok := m.Device(ref.Name)
		if !ok {
			continue // deleted meanwhile
		}
		raw := m.DeviceInfoJSON(ref.Name, uid)
		// The labels in any order: each pair hashed alone, XOR-ed.
		var ls uint64
		for k, v := range labels {
			lh.Reset()
			lh.WriteString(k)
			lh.WriteByte(0)
			lh.WriteString(v)
			ls ^= lh.Sum64()
		}
		h.Reset()
		h.WriteString(uid)
		h.Write(binary.LittleEndian.AppendUint64(buf[:0], ls))
		h.Write(raw)
		sum := h.Sum64()

		for len(old) > 0 && old[0].name < ref.Name {
			old = old[1:]
		}
		var d device
		if len(old) > 0 && old[0].name == ref.Name && old[0].sum == sum {
			p := &old[0]
			d = *p
			d.labels = labels
		} else {
			var info schema.DeviceObservedInfo
			if err := json.Unmarshal(raw, &info); err != nil {
				return nil, fmt.Errorf("dashboard: status of device %s: %w", ref.Name, err)
			}
			d = device{name: ref.Name, labels: labels, info: &info, sum: sum}
			d.state = stateOf(&info)
			d.search = searchKey(ref.Name, labels, &info)
		}
		if ds := m.Desired(ref.Name); ds != d.ds {
			d.ds, d.desired = ds, nil
			if ds != nil && len(ds.Pods) > 0 {
				d.desired = make(map[string]string, len(ds.Pods))
				for _, p := range ds.Pods {
					d.desired[p.Name] = p.Hash
				}
			}
		}
		s.devices = append(s.devices, d)
		s.counts.add(&d)
	}
	return s, nil
}

// lookup returns the device of that name, or nil.
func (s *snapshot) lookup(name string) *device {
	if s == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(s.devices, name, func(d device, name string) int { return cmp.Compare(d.name, name) })
	if !ok {
		return nil
	}
	return &s.devices[i]
}

func (c *Counts) add(d *device) {
	c.Devices++
	switch d.state {
	case StateOnline:
		c.Online++
	case StateStale:
		c.Stale++
	case StateOffline:
		c.Offline++
	default:
		c.Unknown++
	}
	if d.info.Converged {
		c.Converged++
	}
}

func stateOf(info *schema.DeviceObservedInfo) string {
	switch {
	case info.LastSeen == nil:
		return StateNever
	case info.Online && info.Stale:
		return StateStale
	case info.Online:
		return StateOnline
	default:
		return StateOffline
	}
}

func searchKey(name string, labels map[string]string, info *schema.DeviceObservedInfo) string {
	var b strings.Builder
	b.WriteString(name)
	for _, k := range sortedKeys(labels) {
		b.WriteByte(' ')
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
	}
	if info.Agent != nil {
		b.WriteByte(' ')
		b.WriteString(info.Agent.Version)
		b.WriteByte(' ')
		b.WriteString(info.Agent.Arch)
	}
	return strings.ToLower(b.String())
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ---- queries ----------------------------------------------------------------------

// Query selects, sorts and pages the devices of a snapshot: the query
// parameters of GET /v1/dashboard/devices.
type Query struct {
	// Search: every word must occur in the device's name, one of its
	// labels (key=value), its agent version or its arch; case-insensitive.
	Search string
	// Selector is a label selector (kubectl's grammar).
	Selector schema.LabelSelector
	// State keeps the devices in that state (StateOnline…), or "problem":
	// not converged, a pod that is not ready, or stale. (Offline alone is
	// no problem: devices come and go.)
	State string
	// Pod keeps the devices given a pod of that name (a deployment's), or
	// reporting one, and adds that pod's state to each row.
	Pod string
	// Sort is a column (name, state, converged, pods, restarts, agent,
	// arch, lastSeen), descending with a leading '-'. Default name.
	Sort   string
	Offset int
	Limit  int
}

// Defaults and bounds of Query.Limit.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

var sortKeys = []string{"name", "state", "converged", "pods", "restarts", "agent", "arch", "lastSeen"}

var states = []string{StateOnline, StateStale, StateOffline, StateNever, "problem"}

// paramError names the query parameter that is wrong.
type paramError struct{ param, msg string }

func (e *paramError) Error() string { return e.param + ": " + e.msg }

// parseQuery reads a Query from URL parameters; parseSel parses the
// labelSelector.
func parseQuery(v url.Values, parseSel func(string) (schema.LabelSelector, error)) (Query, error) {
	q := Query{Search: v.Get("q"), State: v.Get("state"), Pod: v.Get("pod"), Sort: v.Get("sort"), Limit: DefaultLimit}
	sel, err := parseSel(v.Get("labelSelector"))
	if err != nil {
		return q, err
	}
	q.Selector = sel
	if q.State != "" && !slices.Contains(states, q.State) {
		return q, &paramError{"state", fmt.Sprintf("%q: want one of %s", trunc(q.State), strings.Join(states, ", "))}
	}
	if q.Sort != "" && !slices.Contains(sortKeys, strings.TrimPrefix(q.Sort, "-")) {
		return q, &paramError{"sort", fmt.Sprintf("%q: want one of %s, with a leading - to reverse", trunc(q.Sort), strings.Join(sortKeys, ", "))}
	}
	for _, p := range []struct {
		name string
		dst  *int
		max  int
	}{{"offset", &q.Offset, 1 << 30}, {"limit", &q.Limit, MaxLimit}} {
		s := v.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > p.max {
			return q, &paramError{p.name, fmt.Sprintf("%q: want a whole number from 0 to %d", trunc(s), p.max)}
		}
		*p.dst = n
	}
	if v.Get("limit") == "0" {
		q.Limit = DefaultLimit
	}
	return q, nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Row is one device in GET /v1/dashboard/devices.
type Row struct {
	Name               string            `json:"name"`
	Labels             map[string]string `json:"labels,omitempty"`
	State              string            `json:"state"`
	Converged          bool              `json:"converged"`
	LastSeen           *time.Time        `json:"lastSeen,omitempty"`
	Agent              string            `json:"agent,omitempty"`
	Arch               string            `json:"arch,omitempty"`
	DesiredGeneration  int64             `json:"desiredGeneration"`
	ObservedGeneration int64             `json:"observedGeneration"`
	// Pods counts the reported pods, Ready those ready; Restarts adds up
	// their restarts.
	Pods     int   `json:"pods"`
	Ready    int   `json:"ready"`
	Restarts int64 `json:"restarts"`
	// Problem is the first pod message or container reason that says
	// what holds the device up.
	Problem string `json:"problem,omitempty"`
	// Pod is the state of the pod Query.Pod names on this device.
	Pod *PodRow `json:"pod,omitempty"`
}

// PodRow is one pod on one device.
type PodRow struct {
	// DesiredHash is the hash the hub gave the device ("" when the
	// device is not given the pod).
	DesiredHash string `json:"desiredHash,omitempty"`
	// Hash is the hash of the revision the device reports it runs (""
	// when it reports no such pod).
	Hash string `json:"hash,omitempty"`
	// Status sums the pod up as `fleet get pods` does: Unknown while
	// the device is not online (or is stale), else the reason of the
	// first container that does not run, else the phase.
	Status string `json:"status,omitempty"`
	// Phase, Ready, Restarts and Message are as the device last reported
	// them (the row's lastSeen says when the hub last heard from it).
	Phase    string `json:"phase,omitempty"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	Message  string `json:"message,omitempty"`
	// Images are the images of the containers that the device reports.
	Images []string `json:"images,omitempty"`
	// FailedRevision is the desired revision the device went back from
	// because it failed to start, if any.
	FailedRevision *schema.FailedRevision `json:"failedRevision,omitempty"`
}

// Page is the answer of GET /v1/dashboard/devices.
type Page struct {
	// Total counts every device; Matched those the query selects.
	Total   int   `json:"total"`
	Matched int   `json:"matched"`
	Offset  int   `json:"offset"`
	Limit   int   `json:"limit"`
	Items   []Row `json:"items"`
	// Seq is the snapshot's sequence number; Time when it was taken.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// page runs q on the snapshot.
func (s *snapshot) page(q Query) Page {
	words := strings.Fields(strings.ToLower(q.Search))
	var sel []*device
	for i := range s.devices {
		d := &s.devices[i]
		if !d.matches(q, words) {
			continue
		}
		sel = append(sel, d)
	}
	if q.Sort != "" && q.Sort != "name" {
		sortDevices(sel, q.Sort)
	}
	p := Page{Total: len(s.devices), Matched: len(sel), Offset: q.Offset, Limit: q.Limit, Items: []Row{}, Seq: s.seq, Time: s.at}
	if q.Offset < len(sel) {
		end := min(len(sel), q.Offset+q.Limit)
		for _, d := range sel[q.Offset:end] {
			p.Items = append(p.Items, d.row(q.Pod))
		}
	}
	return p
}

func (d *device) matches(q Query, words []string) bool {
	for _, w := range words {
		if !strings.Contains(d.search, w) {
			return false
		}
	}
	if !q.Selector.Empty() && !q.Selector.Matches(d.labels) {
		return false
	}
	switch q.State {
	case "":
	case "problem":
		if d.info.Converged && d.ready() == len(d.info.Pods) && d.state != StateStale {
			return false
		}
	default:
		if d.state != q.State {
			return false
		}
	}
	if q.Pod != "" {
		if _, ok := d.desired[q.Pod]; !ok && d.reported(q.Pod) == nil {
			return false
		}
	}
	return true
}

func (d *device) ready() int {
	n := 0
	for _, p := range d.info.Pods {
		if p.Ready {
			n++
		}
	}
	return n
}

func (d *device) restarts() int64 {
	var n int64
	for _, p := range d.info.Pods {
		n += int64(p.Restarts)
	}
	return n
}

func (d *device) reported(pod string) *schema.PodStatus {
	for i := range d.info.Pods {
		if d.info.Pods[i].Name == pod {
			return &d.info.Pods[i]
		}
	}
	return nil
}

func (d *device) row(pod string) Row {
	info := d.info
	r := Row{
		Name: d.name, Labels: d.labels, State: d.state, Converged: info.Converged, LastSeen: info.LastSeen,
		DesiredGeneration: info.DesiredGeneration, ObservedGeneration: info.ObservedGeneration,
		Pods: len(info.Pods), Ready: d.ready(), Restarts: d.restarts(),
	}
	if info.Agent != nil {
		r.Agent, r.Arch = info.Agent.Version, info.Agent.Arch
	}
	for _, p := range info.Pods {
		if r.Problem != "" {
			break
		}
		if p.Message != "" {
			r.Problem = p.Name + ": " + p.Message
			break
		}
		for _, c := range p.Containers {
			if c.Reason != "" && c.State != "running" && c.Reason != "Completed" {
				r.Problem = p.Name + ": " + c.Reason
				break
			}
		}
	}
	if pod != "" {
		pr := &PodRow{DesiredHash: d.desired[pod]}
		if p := d.reported(pod); p != nil {
			pr.Hash, pr.Phase, pr.Ready, pr.Restarts, pr.Message = p.Hash, string(p.Phase), p.Ready, p.Restarts, p.Message
			pr.Status, pr.FailedRevision = p.StatusText(), p.FailedRevision
			if d.state != StateOnline {
				pr.Status = string(schema.PhaseUnknown)
			}
			for _, c := range p.Containers {
				pr.Images = append(pr.Images, c.Image)
			}
		}
		r.Pod = pr
	}
	return r
}

// stateRank orders states for sorting: the ones needing attention first.
var stateRank = map[string]int{StateOffline: 0, StateStale: 1, StateNever: 2, StateOnline: 3}

func sortDevices(ds []*device, key string) {
	desc := strings.HasPrefix(key, "-")
	key = strings.TrimPrefix(key, "-")
	var by func(a, b *device) int
	switch key {
	case "name":
		by = func(a, b *device) int { return 0 }
	case "state":
		by = func(a, b *device) int { return cmp.Compare(stateRank[a.state], stateRank[b.state]) }
	case "converged":
		by = func(a, b *device) int { return cmpBool(a.info.Converged, b.info.Converged) }
	case "pods":
		by = func(a, b *device) int { return cmp.Compare(len(a.info.Pods), len(b.info.Pods)) }
	case "restarts":
		by = func(a, b *device) int { return cmp.Compare(a.restarts(), b.restarts()) }
	case "agent":
		by = func(a, b *device) int { return cmp.Compare(agentOf(a).Version, agentOf(b).Version) }
	case "arch":
		by = func(a, b *device) int { return cmp.Compare(agentOf(a).Arch, agentOf(b).Arch) }
	case "lastSeen":
		by = func(a, b *device) int { return cmp.Compare(seen(a), seen(b)) }
	}
	slices.SortStableFunc(ds, func(a, b *device) int {
		c := by(a, b)
		if desc {
			c = -c
		}
		if c == 0 {
			if key == "name" && desc {
				return cmp.Compare(b.name, a.name)
			}
			return cmp.Compare(a.name, b.name)
		}
		return c
	})
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

func agentOf(d *device) schema.AgentInfo {
	if d.info.Agent == nil {
		return schema.AgentInfo{}
	}
	return *d.info.Agent
}

func seen(d *device) int64 {
	if d.info.LastSeen == nil {
		return 0
	}
	return d.info.LastSeen.UnixNano()
}
