// Package fakehubtest is an in-memory hub HTTP API (hub/API.md) for tests
// of API clients: the fleet CLI, the Go client, as net/http/httptest is for
// HTTP handlers. It validates with the real schema package and keeps
// generation, resourceVersion and watch semantics, but has no store,
// controller or broker: deployment and device status are whatever the test
// sets. It keeps ConfigMaps and Secrets too, and answers Secrets as the hub
// does: keys and sizes, never values (Secret returns what it stores).
//
// Only tests import it: no binary links a fake hub (cmd/fleet's
// TestFakeHubIsTestOnly checks every non-test file of the module).
package fakehubtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/selector"
)

// Hub is the fake. Serve it with httptest.NewServer(hub).
type Hub struct {
	token string

	mu          sync.Mutex
	rev         uint64
	uid         int
	deployments map[string]*schema.Deployment
	devices     map[string]*schema.Device
	configMaps  map[string]*schema.ConfigMap
	secrets     map[string]*schema.Secret // with their values
	agents      map[string]*schema.AgentRollout
	events      map[string][]schema.Event
	tokens      map[string]string
	history     []change // every write and bookmark, oldest first
	seq         uint64   // sequence number of the next history entry
	compacted   uint64   // a watch from before this revision is Expired
	changed     chan struct{}
	requests    []string
	info        *schema.HubInfo
	credentials map[string]credential
	failures    map[string]*failure
	revisions   map[string][]schema.DeploymentRevision // oldest first
}

type change struct {
	seq  uint64
	rev  uint64
	kind string // "deployments", "devices", "configmaps" or "secrets"
	typ  string
	obj  []byte
	lbls map[string]string
}

// New returns an empty fake hub that accepts the bearer token.
func New(token string) *Hub {
	return &Hub{
		token:       token,
		deployments: map[string]*schema.Deployment{},
		devices:     map[string]*schema.Device{},
		configMaps:  map[string]*schema.ConfigMap{},
		secrets:     map[string]*schema.Secret{},
		agents:      map[string]*schema.AgentRollout{},
		tokens:      map[string]string{},
		changed:     make(chan struct{}),
		info:        &schema.HubInfo{Version: "fakehub", Store: "fake-store", MQTTURL: DefaultMQTTURL},
		credentials: map[string]credential{},
		failures:    map[string]*failure{},
	}
}

// Requests returns "METHOD /path?query" of every request served so far.
func (h *Hub) Requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// Deployment returns a copy of a stored deployment, or nil.
func (h *Hub) Deployment(name string) *schema.Deployment {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.deployments[name]
	if !ok {
		return nil
	}
	return clone(d)
}

// Device returns a copy of a stored device, or nil.
func (h *Hub) Device(name string) *schema.Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.devices[name]
	if !ok {
		return nil
	}
	return clone(d)
}

// ConfigMap returns a copy of a stored ConfigMap, or nil.
func (h *Hub) ConfigMap(name string) *schema.ConfigMap {
	h.mu.Lock()
	defer h.mu.Unlock()
	return clone(h.configMaps[name])
}

// Secret returns a copy of a stored Secret with its values, as the hub
// keeps them (the API never answers them), or nil.
func (h *Hub) Secret(name string) *schema.Secret {
	h.mu.Lock()
	defer h.mu.Unlock()
	return clone(h.secrets[name])
}

// AgentRollout returns a copy of a stored AgentRollout, or nil.
func (h *Hub) AgentRollout(name string) *schema.AgentRollout {
	h.mu.Lock()
	defer h.mu.Unlock()
	return clone(h.agents[name])
}

// SetDeviceStatus sets what the hub observed of a device, as the status
// ingest would, and notifies watchers. It fails for an unknown device.
func (h *Hub) SetDeviceStatus(name string, st *schema.DeviceObservedInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.devices[name]
	if !ok {
		return fmt.Errorf("fakehubtest: no device %q", name)
	}
	d.Status = clone(st)
	if st != nil && st.Agent != nil && st.Agent.Arch != "" {
		d.Metadata.Labels[schema.LabelArch] = st.Agent.Arch
	}
	h.record("devices", schema.WatchModified, d)
	return nil
}

// SetDeviceEvents sets the events the hub answers for a device, as the
// status ingest would have collected them. It fails for an unknown device.
func (h *Hub) SetDeviceEvents(name string, evs []schema.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.devices[name]; !ok {
		return fmt.Errorf("fakehubtest: no device %q", name)
	}
	if h.events == nil {
		h.events = map[string][]schema.Event{}
	}
	h.events[name] = slices.Clone(evs)
	return nil
}

func (h *Hub) deviceEvents(w http.ResponseWriter, name string) {
	h.mu.Lock()
	_, ok := h.devices[name]
	evs := slices.Clone(h.events[name])
	h.mu.Unlock()
	if !ok {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", singular("devices"), name), nil)
		return
	}
	if evs == nil {
		evs = []schema.Event{}
	}
	writeJSON(w, http.StatusOK, schema.EventList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "EventList"}, Items: evs})
}

// allEvents answers GET /v1/events as the hub does: the events of the
// selected devices, of one type, the newest limit of them.
func (h *Hub) allEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	typ := q.Get("type")
	if typ != "" && typ != schema.EventNormal && typ != schema.EventWarning {
		writeStatus(w, http.StatusBadRequest, "Invalid", fmt.Sprintf("type: unsupported value %q", typ), nil)
		return
	}
	limit := schema.DefaultEventsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeStatus(w, http.StatusBadRequest, "Invalid", fmt.Sprintf("limit: %q", v), nil)
			return
		}
		limit = n
	}
	h.mu.Lock()
	var evs []schema.Event
	for _, name := range slices.Sorted(maps.Keys(h.devices)) {
		ok, err := matches(q.Get("labelSelector"), h.devices[name].Metadata.Labels)
		if err != nil {
			h.mu.Unlock()
			writeInvalid(w, err)
			return
		}
		for _, ev := range h.events[name] {
			if ok && (typ == "" || ev.Type == typ) {
				evs = append(evs, ev)
			}
		}
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, schema.EventList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "EventList"},
		Items: append([]schema.Event{}, schema.NewestEvents(evs, limit)...)})
}

// SetAgentRolloutStatus sets an AgentRollout's status, as the controller
// would.
func (h *Hub) SetAgentRolloutStatus(name string, st *schema.AgentRolloutStatus) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.agents[name]
	if !ok {
		return fmt.Errorf("fakehubtest: no agentrollout %q", name)
	}
	a.Status = clone(st)
	return nil
}

// SetDeploymentStatus sets a deployment's aggregated status, as the
// controller would, and notifies watchers.
func (h *Hub) SetDeploymentStatus(name string, st *schema.DeploymentStatus) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.deployments[name]
	if !ok {
		return fmt.Errorf("fakehubtest: no deployment %q", name)
	}
	d.Status = clone(st)
	h.record("deployments", schema.WatchModified, d)
	return nil
}

// Compact forgets the watch history up to the current revision, so a watch
// from an older resourceVersion gets 410 Expired.
func (h *Hub) Compact() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.history = nil
	h.compacted = h.rev
}

// Bookmark sends a BOOKMARK at the current revision to every watcher.
func (h *Hub) Bookmark() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.history = append(h.history, change{seq: h.seq, rev: h.rev, typ: schema.WatchBookmark})
	h.seq++
	close(h.changed)
	h.changed = make(chan struct{})
}

// Revision returns the store revision of the last write.
func (h *Hub) Revision() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// record bumps the revision, stamps obj with it and notifies watchers.
// Call with h.mu held.
func (h *Hub) record(kind, typ string, obj schema.Object) {
	h.rev++
	obj.GetMetadata().ResourceVersion = strconv.FormatUint(h.rev, 10)
	b, _ := json.Marshal(answer(obj))
	h.history = append(h.history, change{seq: h.seq, rev: h.rev, kind: kind, typ: typ, obj: b, lbls: maps.Clone(obj.GetMetadata().Labels)})
	h.seq++
	close(h.changed)
	h.changed = make(chan struct{})
}

// ServeHTTP implements the API.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, strings.TrimSuffix(r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery, "?"))
	h.mu.Unlock()
	if r.URL.Path == "/healthz" {
		io.WriteString(w, "ok")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+h.token {
		writeStatus(w, http.StatusUnauthorized, "Unauthorized", "missing or wrong bearer token", nil)
		return
	}
	if h.injectedFailure(w, r) || h.serveAccess(w, r) {
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	if h.serveRevisions(w, r, parts) {
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/v1/") || len(parts) > 3 {
		writeStatus(w, http.StatusNotFound, "NotFound", "no such path "+r.URL.Path, nil)
		return
	}
	if parts[0] == "apply" && len(parts) == 1 {
		if r.Method != http.MethodPost {
			writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "use POST", nil)
			return
		}
		h.apply(w, r)
		return
	}
	if parts[0] == "events" && len(parts) == 1 && r.Method == http.MethodGet {
		h.allEvents(w, r)
		return
	}
	kind := parts[0]
	if singular(kind) == "" {
		writeStatus(w, http.StatusNotFound, "NotFound", "no such resource "+kind, nil)
		return
	}
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		h.watch(w, r, kind)
	case len(parts) == 1 && r.Method == http.MethodGet:
		h.list(w, r, kind)
	case len(parts) == 1 && r.Method == http.MethodPost:
		h.write(w, r, kind, "")
	case len(parts) == 2 && r.Method == http.MethodGet:
		h.get(w, kind, parts[1])
	case len(parts) == 2 && r.Method == http.MethodPut:
		h.write(w, r, kind, parts[1])
	case len(parts) == 2 && r.Method == http.MethodDelete:
		h.delete(w, r, kind, parts[1])
	case len(parts) == 3 && kind == "devices" && parts[2] == "events" && r.Method == http.MethodGet:
		h.deviceEvents(w, parts[1])
	case len(parts) == 3 && kind == "devices" && parts[2] == "token" && r.Method == http.MethodPost:
		h.issueToken(w, parts[1])
	default:
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method+" "+r.URL.Path+" is not allowed", nil)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, code int, reason, msg string, details []schema.FieldError) {
	writeJSON(w, code, schema.Status{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"},
		Code:     code, Reason: reason, Message: msg, Details: details,
	})
}

func writeInvalid(w http.ResponseWriter, err error) {
	var ve *schema.ValidationError
	var details []schema.FieldError
	if errors.As(err, &ve) {
		details = ve.Errors
	}
	writeStatus(w, http.StatusBadRequest, "Invalid", err.Error(), details)
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	data, err := io.ReadAll(io.LimitReader(r.Body, schema.MaxManifestBytes+1))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", "read body: "+err.Error(), nil)
		return nil, false
	}
	if len(data) > schema.MaxManifestBytes {
		writeStatus(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "body is larger than the allowed manifest size", nil)
		return nil, false
	}
	return data, true
}

func (h *Hub) apply(w http.ResponseWriter, r *http.Request) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	objs, err := schema.DecodeManifests(data)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	dryRun := r.URL.Query().Get("dryRun") == "server"
	h.mu.Lock()
	defer h.mu.Unlock()
	resp := schema.ApplyResponse{DryRun: dryRun}
	for _, o := range objs {
		res, stored := h.applyOne(o, dryRun)
		b, _ := json.Marshal(answer(stored))
		res.Object = b
		resp.Results = append(resp.Results, res)
		resp.Warnings = append(resp.Warnings, schema.SecretEnvWarnings(o)...)
	}
	writeJSON(w, http.StatusOK, resp)
}

// applyOne applies one valid object. Call with h.mu held.
func (h *Hub) applyOne(o schema.Object, dryRun bool) (schema.ApplyResult, schema.Object) {
	md := o.GetMetadata()
	res := schema.ApplyResult{Kind: o.GetTypeMeta().Kind, Name: md.Name}
	kind := kindOf(o)
	cur := h.lookup(kind, md.Name)
	if cur == nil {
		res.Action = schema.ActionCreated
		h.stamp(o, nil)
		if !dryRun {
			h.store(kind, o)
			h.record(kind, schema.WatchAdded, o)
		}
		return res, o
	}
	if sameContent(cur, o) {
		res.Action = schema.ActionUnchanged
		return res, cloneObject(cur)
	}
	res.Action = schema.ActionConfigured
	h.stamp(o, cur)
	if !dryRun {
		h.store(kind, o)
		h.record(kind, schema.WatchModified, o)
	}
	return res, o
}

// resources maps each collection to its object kind.
var resources = map[string]string{
	"deployments":   schema.KindDeployment,
	"devices":       schema.KindDevice,
	"configmaps":    schema.KindConfigMap,
	"secrets":       schema.KindSecret,
	"agentrollouts": schema.KindAgentRollout,
}

func kindOf(o schema.Object) string {
	for res, k := range resources {
		if k == o.GetTypeMeta().Kind {
			return res
		}
	}
	return "deployments"
}

func (h *Hub) lookup(kind, name string) schema.Object {
	switch kind {
	case "devices":
		if d, ok := h.devices[name]; ok {
			return d
		}
	case "configmaps":
		if c, ok := h.configMaps[name]; ok {
			return c
		}
	case "secrets":
		if s, ok := h.secrets[name]; ok {
			return s
		}
	case "agentrollouts":
		if a, ok := h.agents[name]; ok {
			return a
		}
	default:
		if d, ok := h.deployments[name]; ok {
			return d
		}
	}
	return nil
}

func (h *Hub) store(kind string, o schema.Object) {
	switch o := o.(type) {
	case *schema.Device:
		h.devices[o.Metadata.Name] = o
	case *schema.Deployment:
		h.recordRevision(o)
		h.deployments[o.Metadata.Name] = o
	case *schema.ConfigMap:
		h.configMaps[o.Metadata.Name] = o
	case *schema.Secret:
		o.Keys = nil
		h.secrets[o.Metadata.Name] = o
	case *schema.AgentRollout:
		h.agents[o.Metadata.Name] = o
	}
}

// answer is an object as the hub answers it: a Secret with its keys and
// their sizes instead of its values.
func answer(o schema.Object) schema.Object {
	s, ok := o.(*schema.Secret)
	if !ok {
		return o
	}
	out := *s
	out.Keys = map[string]int{}
	for k, v := range s.Data {
		out.Keys[k] = len(v)
	}
	if len(out.Keys) == 0 {
		out.Keys = nil
	}
	out.Data, out.StringData = nil, nil
	return &out
}

// stamp sets the hub-owned fields of o, a new version of cur (nil for a new
// object), and the labels the hub owns on a device.
func (h *Hub) stamp(o, cur schema.Object) {
	md := o.GetMetadata()
	if d, ok := o.(*schema.Device); ok {
		if d.Metadata.Labels == nil {
			d.Metadata.Labels = map[string]string{}
		}
		d.Metadata.Labels[schema.LabelDevice] = d.Metadata.Name
		if c, ok := cur.(*schema.Device); ok {
			if a, ok := c.Metadata.Labels[schema.LabelArch]; ok {
				d.Metadata.Labels[schema.LabelArch] = a
			}
			d.Status = c.Status
		}
	}
	if cur == nil {
		h.uid++
		now := time.Now().UTC().Truncate(time.Second)
		md.UID = fmt.Sprintf("fake-uid-%d", h.uid)
		md.Generation = 1
		md.CreationTimestamp = &now
		return
	}
	cm := cur.GetMetadata()
	md.UID, md.CreationTimestamp, md.Generation = cm.UID, cm.CreationTimestamp, cm.Generation
	if !reflect.DeepEqual(specOf(o), specOf(cur)) {
		md.Generation++
	}
	if d, ok := o.(*schema.Deployment); ok {
		d.Status = cur.(*schema.Deployment).Status
	}
}

func specOf(o schema.Object) any {
	switch o := o.(type) {
	case *schema.Device:
		return o.Spec
	case *schema.Deployment:
		return o.Spec
	case *schema.ConfigMap:
		return [2]any{o.Data, o.BinaryData}
	case *schema.Secret:
		return [2]any{o.Type, o.Data}
	case *schema.AgentRollout:
		return o.Spec
	}
	return nil
}

// sameContent compares what a user owns: labels, annotations and spec.
func sameContent(cur, o schema.Object) bool {
	lbls := maps.Clone(o.GetMetadata().Labels)
	if _, ok := o.(*schema.Device); ok {
		if lbls == nil {
			lbls = map[string]string{}
		}
		for k, v := range cur.GetMetadata().Labels {
			if strings.HasPrefix(k, schema.LabelPrefix) {
				lbls[k] = v
			}
		}
	}
	return maps.Equal(lbls, cur.GetMetadata().Labels) &&
		maps.Equal(o.GetMetadata().Annotations, cur.GetMetadata().Annotations) &&
		reflect.DeepEqual(specOf(o), specOf(cur))
}

// matches reports whether labels satisfy the label selector, parsed as
// the hub parses it (schema/selector); its error is the hub's 400 Invalid
// naming labelSelector.
func matches(sel string, labels map[string]string) (bool, error) {
	parsed, err := selector.Parse(sel)
	if err != nil {
		return false, &schema.ValidationError{Errors: []schema.FieldError{{Field: "labelSelector", Message: fmt.Sprintf("%q: %v", sel, err)}}}
	}
	return parsed.Matches(labels), nil
}

func (h *Hub) list(w http.ResponseWriter, r *http.Request, kind string) {
	sel := r.URL.Query().Get("labelSelector")
	if _, err := matches(sel, nil); err != nil {
		writeInvalid(w, err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	rv := strconv.FormatUint(h.rev, 10)
	if kind == "devices" {
		l := schema.DeviceList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeviceList"}, Metadata: schema.ListMeta{ResourceVersion: rv}, Items: []schema.Device{}}
		for _, name := range slices.Sorted(maps.Keys(h.devices)) {
			if ok, _ := matches(sel, h.devices[name].Metadata.Labels); ok {
				l.Items = append(l.Items, *clone(h.devices[name]))
			}
		}
		writeJSON(w, http.StatusOK, l)
		return
	}
	switch kind {
	case "configmaps":
		l := schema.ConfigMapList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "ConfigMapList"}, Metadata: schema.ListMeta{ResourceVersion: rv}, Items: []schema.ConfigMap{}}
		for _, name := range slices.Sorted(maps.Keys(h.configMaps)) {
			if ok, _ := matches(sel, h.configMaps[name].Metadata.Labels); ok {
				l.Items = append(l.Items, *clone(h.configMaps[name]))
			}
		}
		writeJSON(w, http.StatusOK, l)
		return
	case "secrets":
		l := schema.SecretList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "SecretList"}, Metadata: schema.ListMeta{ResourceVersion: rv}, Items: []schema.Secret{}}
		for _, name := range slices.Sorted(maps.Keys(h.secrets)) {
			if ok, _ := matches(sel, h.secrets[name].Metadata.Labels); ok {
				l.Items = append(l.Items, *answer(h.secrets[name]).(*schema.Secret))
			}
		}
		writeJSON(w, http.StatusOK, l)
		return
	case "agentrollouts":
		items := []schema.Object{}
		for _, name := range slices.Sorted(maps.Keys(h.agents)) {
			if ok, _ := matches(sel, h.agents[name].Metadata.Labels); ok {
				items = append(items, clone(h.agents[name]))
			}
		}
		info, _ := schema.LookupKind(schema.KindAgentRollout)
		writeJSON(w, http.StatusOK, info.NewList(items, rv))
		return
	}
	l := schema.DeploymentList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "DeploymentList"}, Metadata: schema.ListMeta{ResourceVersion: rv}, Items: []schema.Deployment{}}
	for _, name := range slices.Sorted(maps.Keys(h.deployments)) {
		if ok, _ := matches(sel, h.deployments[name].Metadata.Labels); ok {
			l.Items = append(l.Items, *clone(h.deployments[name]))
		}
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *Hub) get(w http.ResponseWriter, kind, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.lookup(kind, name)
	if o == nil {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", singular(kind), name), nil)
		return
	}
	writeJSON(w, http.StatusOK, answer(o))
}

// singular is the object kind of a collection, "" for an unknown one.
func singular(kind string) string { return resources[kind] }

func (h *Hub) write(w http.ResponseWriter, r *http.Request, kind, name string) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	o, err := schema.DecodeObject(data)
	if err != nil {
		writeInvalid(w, err)
		return
	}
	if kindOf(o) != kind {
		writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("a %s in the %s collection", o.GetTypeMeta().Kind, kind), nil)
		return
	}
	md := o.GetMetadata()
	if name != "" && md.Name != name {
		writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("metadata.name %q does not match the URL's %q", md.Name, name), nil)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.lookup(kind, md.Name)
	switch {
	case name == "" && cur != nil:
		writeStatus(w, http.StatusConflict, "AlreadyExists", fmt.Sprintf("%s %q already exists", singular(kind), md.Name), nil)
		return
	case name != "" && cur == nil:
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", singular(kind), name), nil)
		return
	case cur != nil && md.ResourceVersion != "" && md.ResourceVersion != cur.GetMetadata().ResourceVersion:
		writeStatus(w, http.StatusConflict, "Conflict", fmt.Sprintf("%s %q was modified: resourceVersion %s is not the current %s", singular(kind), name, md.ResourceVersion, cur.GetMetadata().ResourceVersion), nil)
		return
	}
	h.stamp(o, cur)
	h.store(kind, o)
	code, typ := http.StatusOK, schema.WatchModified
	if cur == nil {
		code, typ = http.StatusCreated, schema.WatchAdded
	}
	h.record(kind, typ, o)
	writeJSON(w, code, answer(o))
}

func (h *Hub) delete(w http.ResponseWriter, r *http.Request, kind, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.lookup(kind, name)
	if cur == nil {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", singular(kind), name), nil)
		return
	}
	if rv := r.URL.Query().Get("resourceVersion"); rv != "" && rv != cur.GetMetadata().ResourceVersion {
		writeStatus(w, http.StatusConflict, "Conflict", fmt.Sprintf("%s %q was modified", singular(kind), name), nil)
		return
	}
	switch kind {
	case "devices":
		delete(h.devices, name)
		delete(h.tokens, name)
	case "configmaps":
		delete(h.configMaps, name)
	case "secrets":
		delete(h.secrets, name)
	default:
		delete(h.deployments, name)
		delete(h.revisions, name)
	}
	h.record(kind, schema.WatchDeleted, cur)
	writeJSON(w, http.StatusOK, answer(cur))
}

func (h *Hub) issueToken(w http.ResponseWriter, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.devices[name]; !ok {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("Device %q not found", name), nil)
		return
	}
	h.uid++
	tok := fmt.Sprintf("fake-device-token-%d", h.uid)
	h.tokens[name] = tok
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, schema.DeviceCredentials{Name: name, Token: tok})
}

// DeviceToken returns the last token issued for a device.
func (h *Hub) DeviceToken(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tokens[name]
}

func (h *Hub) watch(w http.ResponseWriter, r *http.Request, kind string) {
	q := r.URL.Query()
	sel := q.Get("labelSelector")
	if _, err := matches(sel, nil); err != nil {
		writeInvalid(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	send := func(typ string, obj any) bool {
		b, _ := json.Marshal(obj)
		return enc.Encode(schema.WatchEvent{Type: typ, Object: b}) == nil
	}
	h.mu.Lock()
	// next is the sequence number of the first history entry to send.
	next := h.seq
	if rvs := q.Get("resourceVersion"); rvs != "" {
		rv, err := strconv.ParseUint(rvs, 10, 64)
		if err != nil {
			h.mu.Unlock()
			writeStatus(w, http.StatusBadRequest, "BadRequest", "resourceVersion must be a decimal number", nil)
			return
		}
		if rv < h.compacted {
			h.mu.Unlock()
			send(schema.WatchError, schema.Status{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"}, Code: http.StatusGone, Reason: "Expired", Message: fmt.Sprintf("resourceVersion %d is too old", rv)})
			return
		}
		for _, c := range h.history {
			if c.typ != schema.WatchBookmark && c.rev > rv {
				next = c.seq
				break
			}
		}
		h.mu.Unlock()
	} else {
		var objs []schema.Object
		switch kind {
		case "devices":
			for _, n := range slices.Sorted(maps.Keys(h.devices)) {
				objs = append(objs, clone(h.devices[n]))
			}
		case "configmaps":
			for _, n := range slices.Sorted(maps.Keys(h.configMaps)) {
				objs = append(objs, clone(h.configMaps[n]))
			}
		case "secrets":
			for _, n := range slices.Sorted(maps.Keys(h.secrets)) {
				objs = append(objs, answer(h.secrets[n]))
			}
		default:
			for _, n := range slices.Sorted(maps.Keys(h.deployments)) {
				objs = append(objs, clone(h.deployments[n]))
			}
		}
		h.mu.Unlock()
		for _, o := range objs {
			if ok, _ := matches(sel, o.GetMetadata().Labels); ok && !send(schema.WatchAdded, o) {
				return
			}
		}
	}
	for {
		h.mu.Lock()
		var evs []change
		for _, c := range h.history {
			if c.seq >= next {
				evs = append(evs, c)
			}
		}
		next = h.seq
		ch := h.changed
		h.mu.Unlock()
		for _, c := range evs {
			switch {
			case c.typ == schema.WatchBookmark:
				md := map[string]any{"metadata": map[string]string{"resourceVersion": strconv.FormatUint(c.rev, 10)}}
				if !send(c.typ, md) {
					return
				}
			case c.kind != kind:
			default:
				if ok, _ := matches(sel, c.lbls); ok {
					if err := enc.Encode(schema.WatchEvent{Type: c.typ, Object: c.obj}); err != nil {
						return
					}
				}
			}
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}

func clone[T any](v *T) *T {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

func cloneObject(o schema.Object) schema.Object {
	switch o := o.(type) {
	case *schema.Device:
		return clone(o)
	case *schema.Deployment:
		return clone(o)
	case *schema.ConfigMap:
		return clone(o)
	case *schema.Secret:
		return clone(o)
	case *schema.AgentRollout:
		return clone(o)
	}
	return o
}
