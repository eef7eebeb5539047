package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/containerdtest"
	"github.com/fleetmq/fleet/test/sysdeps"
	"github.com/fleetmq/fleet/test/testimage"
)

// Broker kinds of FleetOptions.Broker.
const (
	// BrokerEmbedded: fleet-hub runs its embedded MQTT broker.
	BrokerEmbedded = "embedded"
	// BrokerMosquitto: a real Mosquitto 2 is the broker and fleet-hub
	// connects to it with --broker; its password and ACL files are the
	// ones the hub serves on /v1/mosquitto/passwd and /acl.
	BrokerMosquitto = "mosquitto"
)

// FleetOptions configure StartFleet. The zero value starts three agents
// on the embedded broker.
type FleetOptions struct {
	// Agents is the number of devices, each with a real fleet-agent
	// (default 3). Devices are named <DevicePrefix>-1 … -N.
	Agents       int
	DevicePrefix string // default "dev"
	// Broker is BrokerEmbedded (default) or BrokerMosquitto.
	Broker string
	// Proxy puts a Proxy between each agent and the broker, so that a
	// test can partition one agent (Agent.Proxy).
	Proxy bool
	// Labels returns the labels of device i (0-based); default none
	// beyond the hub's own fleet/device.
	Labels func(i int) map[string]string
	// AgentResync is the agents' --resync-interval (default 2 s).
	AgentResync time.Duration
	// Shell also imports the test image with a shell (testimage
	// Options.Shell) into every device's namespace, as Fleet.ShellImage.
	Shell bool
	// HubArgs and AgentArgs are extra flags for every fleet-hub and
	// fleet-agent process.
	HubArgs   []string
	AgentArgs []string
	// AgentEnv are extra environment variables of every fleet-agent.
	AgentEnv []string
}

// Fleet is a whole Fleet on one machine: a private containerd shared by
// every agent (one namespace per agent, the test image imported into
// each), a fleet-hub process, optionally a Mosquitto, and one fleet-agent
// process per device.
type Fleet struct {
	Hub        *Hub
	Containerd *containerdtest.Daemon
	Mosquitto  *mosquittotest.Mosquitto // nil on the embedded broker
	Agents     []*Agent
	// Image is the reference of the test image every namespace holds
	// (testimage: `sleep forever` unless args say otherwise).
	Image string
	// ShellImage is the test image with busybox (FleetOptions.Shell).
	ShellImage string
	// BrokerURL is where devices connect (the hub's embedded broker or
	// Mosquitto), before any Proxy.
	BrokerURL string

	opts    FleetOptions
	cli     string
	cliHome string
	events  *containerdEvents

	// hubPassword is the hub's MQTT password on Mosquitto.
	hubPassword string

	mu     sync.Mutex
	tokens map[string]string // device -> token, for Mosquitto accounts
}

// StartFleet starts everything and waits until every agent is online and
// converged on an empty desired state. Teardown, at the end of the test,
// runs in reverse: agents (SIGTERM), proxies, hub, Mosquitto, then the
// containerd harness, which kills every task and removes every container,
// snapshot and mount it made.
//
// Without root, containerd or runc the test is skipped, or failed when
// FLEET_REQUIRE_CONTAINERD=1 (containerdtest.Require).
func StartFleet(t testing.TB, opts FleetOptions) *Fleet {
	t.Helper()
	if opts.Agents <= 0 {
		opts.Agents = 3
	}
	if opts.DevicePrefix == "" {
		opts.DevicePrefix = "dev"
	}
	if opts.Broker == "" {
		opts.Broker = BrokerEmbedded
	}
	if opts.AgentResync <= 0 {
		opts.AgentResync = 2 * time.Second
	}
	if opts.Broker != BrokerEmbedded && opts.Broker != BrokerMosquitto {
		t.Fatalf("StartFleet: unknown broker kind %q", opts.Broker)
	}
	f := &Fleet{opts: opts, tokens: map[string]string{}, cliHome: t.TempDir()}
	for _, name := range []string{"fleet", "fleet-agent"} {
		p, err := BuildBinary(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "fleet" {
			f.cli = p
		}
	}

	devices := f.startContainerd(t, opts)
	f.events = watchContainerd(t, f.Containerd.Client(), AgentNamespace(devices[0]))

	hubOpts := HubOptions{Args: append([]string(nil), opts.HubArgs...)}
	if opts.Broker == BrokerMosquitto {
		hubPassword := randomHex(t, 24)
		f.hubPassword = hubPassword
		pwFile := filepath.Join(t.TempDir(), "hub-mqtt-password")
		if err := os.WriteFile(pwFile, []byte(hubPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Mosquitto starts knowing only the hub; the devices' accounts
		// come from the hub once registered (SyncMosquittoAccounts).
		f.Mosquitto = mosquittotest.Start(t, mosquittotest.Config{Accounts: []broker.MosquittoAccount{{
			Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: hubPassword,
		}}})
		hubOpts.Args = append([]string{"--broker", f.Mosquitto.URL, "--broker-username", "fleet-hub",
			"--broker-password-file", pwFile}, hubOpts.Args...)
	}
	f.Hub = StartHub(t, hubOpts)
	f.BrokerURL = f.Hub.MQTTURL
	if f.BrokerURL == "" {
		t.Fatalf("fleet-hub reports no MQTT URL (GET /v1/info)")
	}

	for i, d := range devices {
		var labels map[string]string
		if opts.Labels != nil {
			labels = opts.Labels(i)
		}
		f.registerDevice(t, d, labels)
	}
	f.SyncMosquittoAccounts(t)

	for _, d := range devices {
		url := f.BrokerURL
		var p *Proxy
		if opts.Proxy {
			p = StartProxy(t, strings.TrimPrefix(url, "tcp://"))
			url = p.URL()
		}
		a := StartAgent(t, AgentOptions{
			Device: d, Broker: url, Token: f.Token(d), HubSigningKey: f.Hub.SigningKey,
			ContainerdSocket: f.Containerd.Socket(),
			ResyncInterval:   opts.AgentResync, Args: opts.AgentArgs, Env: opts.AgentEnv,
		})
		a.Proxy = p
		f.Agents = append(f.Agents, a)
	}
	f.AwaitConverged(t, time.Minute, devices...)
	return f
}

// startContainerd starts the fleet's containerd and imports the test
// images (the shell image too with opts.Shell) into every device's
// namespace; it returns the devices' names.
func (f *Fleet) startContainerd(t testing.TB, opts FleetOptions) (devices []string) {
	t.Helper()
	f.Containerd = containerdtest.Start(t)
	tarPath, ref := testimage.Build(t, testimage.Options{})
	f.Image = ref
	tars := []string{tarPath}
	if opts.Shell {
		sysdeps.Require(t, "busybox")
		shellTar, shellRef := testimage.Build(t, testimage.Options{Ref: "fleet.test/shell:v1", Shell: true})
		f.ShellImage = shellRef
		tars = append(tars, shellTar)
	}
	devices = make([]string, opts.Agents)
	for i := range devices {
		devices[i] = fmt.Sprintf("%s-%d", opts.DevicePrefix, i+1)
		for _, tp := range tars {
			ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), AgentNamespace(devices[i])), 2*time.Minute)
			_, err := testimage.Import(ctx, f.Containerd.Client(), tp, "")
			cancel()
			if err != nil {
				t.Fatalf("import the test image %s for %s: %v", tp, devices[i], err)
			}
		}
	}
	return devices
}

// Devices returns the names of the fleet's agent devices.
func (f *Fleet) Devices() []string {
	out := make([]string, len(f.Agents))
	for i, a := range f.Agents {
		out[i] = a.Device
	}
	return out
}

// Agent returns the agent of device.
func (f *Fleet) Agent(t testing.TB, device string) *Agent {
	t.Helper()
	for _, a := range f.Agents {
		if a.Device == device {
			return a
		}
	}
	t.Fatalf("no agent for device %q", device)
	return nil
}

// Token returns the token the harness got for device.
func (f *Fleet) Token(device string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens[device]
}

// ---- devices, CLI and API ---------------------------------------------------------

// AddDevice registers a device without an agent (a test's own MQTT client
// can use its token) and, on Mosquitto, reloads the broker's accounts.
func (f *Fleet) AddDevice(t testing.TB, name string, labels map[string]string) string {
	t.Helper()
	tok := f.registerDevice(t, name, labels)
	f.SyncMosquittoAccounts(t)
	return tok
}

// registerDevice runs `fleet device add NAME --label k=v -o json`.
func (f *Fleet) registerDevice(t testing.TB, name string, labels map[string]string) string {
	t.Helper()
	args := []string{"device", "add", name, "-o", "json"}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--label", k+"="+labels[k])
	}
	var cred schema.DeviceCredentials
	if err := json.Unmarshal([]byte(f.CLI(t, args...)), &cred); err != nil || cred.Name != name || cred.Token == "" {
		t.Fatalf("fleet device add %s -o json: %v %+v", name, err, cred)
	}
	f.mu.Lock()
	f.tokens[name] = cred.Token
	f.mu.Unlock()
	return cred.Token
}

// CLI runs the fleet CLI against the hub (through the admin.conf the hub
// wrote) and returns its standard output; a non-zero exit fails t.
func (f *Fleet) CLI(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, err := f.RunCLI(t, "", args...)
	if err != nil {
		t.Fatalf("fleet %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// RunCLI runs the fleet CLI with stdin and returns stdout, stderr and the
// exit error.
func (f *Fleet) RunCLI(t testing.TB, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.cli, args...)
	cmd.Env = append(cleanEnv(f.cliHome), "FLEET_CONFIG="+f.Hub.AdminConfig())
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// Apply applies a YAML or JSON manifest (one or more documents) through
// `fleet apply -f -` and returns what the hub answered.
func (f *Fleet) Apply(t testing.TB, manifest string) []schema.ApplyResult {
	t.Helper()
	out, errOut, err := f.RunCLI(t, manifest, "apply", "-f", "-", "-o", "json")
	if err != nil {
		t.Fatalf("fleet apply: %v\n%s%s\nmanifest:\n%s", err, out, errOut, manifest)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("fleet apply -o json: %v\n%s", err, out)
	}
	res := make([]schema.ApplyResult, len(list.Items))
	for i, raw := range list.Items {
		var o struct {
			Kind     string            `json:"kind"`
			Metadata schema.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		res[i] = schema.ApplyResult{Kind: o.Kind, Name: o.Metadata.Name, Object: raw}
	}
	return res
}

// Request sends an authenticated request to the hub API; unlike Hub.Do it
// returns transport errors (a hub being restarted) instead of failing.
func (f *Fleet) Request(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return hubRequest(ctx, f.Hub.URL, f.Hub.Token, method, path, body)
}

func hubRequest(ctx context.Context, base, token, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Get GETs path and decodes the 200 answer into v.
func (f *Fleet) Get(t testing.TB, path string, v any) {
	t.Helper()
	code, body, err := f.Request(context.Background(), http.MethodGet, path, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s", path, code, err, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// Device returns the hub's view of one device.
func (f *Fleet) Device(t testing.TB, name string) schema.Device {
	t.Helper()
	var d schema.Device
	f.Get(t, "/v1/devices/"+name, &d)
	return d
}

// Deployment returns the hub's view of one deployment.
func (f *Fleet) Deployment(t testing.TB, name string) schema.Deployment {
	t.Helper()
	var d schema.Deployment
	f.Get(t, "/v1/deployments/"+name, &d)
	return d
}

// PodHash is the hash agents report for the pod of a stored deployment:
// containers of that version have it (first 8 characters) in their ID
// and in their fleet.pod-hash label.
func (f *Fleet) PodHash(t testing.TB, deployment string) string {
	t.Helper()
	d := f.Deployment(t, deployment)
	return schema.TemplateHash(d.Spec.Template)
}

// ---- waiting --------------------------------------------------------------------

// pollEvery is the poll interval of every Await helper (not a sleep used
// as synchronisation: each helper re-checks a condition until a deadline).
const pollEvery = 50 * time.Millisecond

// AwaitDevices polls GET /v1/devices until cond holds for every named
// device (all devices if none are named), and returns the last list.
func (f *Fleet) AwaitDevices(t testing.TB, timeout time.Duration, what string, cond func(schema.Device) bool, devices ...string) map[string]schema.Device {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]schema.Device
	var lastErr error
	for {
		var list schema.DeviceList
		code, body, err := f.Request(context.Background(), http.MethodGet, "/v1/devices", nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /v1/devices: %d %s", code, body)
		}
		if err == nil {
			err = json.Unmarshal(body, &list)
		}
		if err == nil {
			last = map[string]schema.Device{}
			for _, d := range list.Items {
				last[d.Metadata.Name] = d
			}
			names := devices
			if len(names) == 0 {
				for n := range last {
					names = append(names, n)
				}
			}
			ok := true
			for _, n := range names {
				d, found := last[n]
				if !found || !cond(d) {
					ok = false
					break
				}
			}
			if ok {
				return last
			}
		}
		lastErr = err
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, n := range devices {
				s, _ := json.Marshal(last[n].Status)
				fmt.Fprintf(&b, "  %s: %s\n", n, s)
			}
			t.Fatalf("devices %v not %s within %v (last error %v):\n%s", devices, what, timeout, lastErr, b.String())
		}
		time.Sleep(pollEvery)
	}
}

// Converged reports whether the hub sees d online, converged, and at its
// latest desired generation.
func Converged(d schema.Device) bool {
	s := d.Status
	return s != nil && s.Online && s.Converged && s.DesiredGeneration > 0 && s.ObservedGeneration == s.DesiredGeneration
}

// AwaitConverged waits until the hub reports every named device online
// and converged with observedGeneration == desiredGeneration.
func (f *Fleet) AwaitConverged(t testing.TB, timeout time.Duration, devices ...string) map[string]schema.Device {
	t.Helper()
	return f.AwaitDevices(t, timeout, "converged", Converged, devices...)
}

// AwaitRollout waits until the deployment's status says its current
// generation runs and is ready on exactly targeted devices.
func (f *Fleet) AwaitRollout(t testing.TB, deployment string, targeted int, timeout time.Duration) schema.Deployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var d schema.Deployment
	for {
		code, body, err := f.Request(context.Background(), http.MethodGet, "/v1/deployments/"+deployment, nil)
		if err == nil && code == http.StatusOK && json.Unmarshal(body, &d) == nil && d.Status != nil {
			s := d.Status
			if s.ObservedGeneration == d.Metadata.Generation && s.Targeted == targeted && s.Updated == targeted && s.Ready == targeted {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment %s not rolled out to %d devices within %v: status %+v", deployment, targeted, timeout, d.Status)
		}
		time.Sleep(pollEvery)
	}
}

// ---- containerd -------------------------------------------------------------------

// Container is a managed container as containerd sees it.
type Container struct {
	ID   string
	Pod  string
	Hash string // fleet.pod-hash
	// Status is the task's status ("" without a task) and PID its
	// process ID (0 without a running task).
	Status containerd.ProcessStatus
	PID    uint32
}

func (f *Fleet) nsCtx(device string) (context.Context, context.CancelFunc) {
	return context.WithTimeout(namespaces.WithNamespace(context.Background(), AgentNamespace(device)), 30*time.Second)
}

// Containers lists the Fleet-managed containers in device's namespace,
// sorted by ID.
func (f *Fleet) Containers(t testing.TB, device string) []Container {
	t.Helper()
	cs, err := f.containers(device)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (f *Fleet) containers(device string) ([]Container, error) {
	ctx, cancel := f.nsCtx(device)
	defer cancel()
	client := f.Containerd.Client()
	list, err := client.Containers(ctx, fmt.Sprintf(`labels.%q==true`, runtime.LabelManaged))
	if err != nil {
		return nil, fmt.Errorf("list containers of %s: %w", device, err)
	}
	var out []Container
	for _, c := range list {
		labels, err := c.Labels(ctx)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("labels of %s/%s: %w", device, c.ID(), err)
		}
		ci := Container{ID: c.ID(), Pod: labels[runtime.LabelPod], Hash: labels[runtime.LabelPodHash]}
		task, err := c.Task(ctx, nil)
		switch {
		case errdefs.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("task of %s/%s: %w", device, c.ID(), err)
		default:
			st, err := task.Status(ctx)
			if err != nil && !errdefs.IsNotFound(err) {
				return nil, fmt.Errorf("task status of %s/%s: %w", device, c.ID(), err)
			}
			ci.Status = st.Status
			if st.Status == containerd.Running {
				ci.PID = task.Pid()
			}
		}
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// AwaitContainers polls device's containers until cond holds, and returns
// them.
func (f *Fleet) AwaitContainers(t testing.TB, device string, timeout time.Duration, what string, cond func([]Container) bool) []Container {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []Container
	var err error
	for {
		last, err = f.containers(device)
		if err == nil && cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: containers not %s within %v (error %v): %+v", device, what, timeout, err, last)
		}
		time.Sleep(pollEvery)
	}
}

// AwaitContainerRunning waits until device runs exactly one container of
// pod, with a running task, and no other container of it; with a hash,
// that container must be of that pod version.
func (f *Fleet) AwaitContainerRunning(t testing.TB, device, pod string, hash ...string) Container {
	t.Helper()
	var got Container
	f.AwaitContainers(t, device, time.Minute, "running pod "+pod, func(cs []Container) bool {
		n := 0
		for _, c := range cs {
			if c.Pod == pod {
				n++
				got = c
			}
		}
		return n == 1 && got.Status == containerd.Running && got.PID != 0 && (len(hash) == 0 || got.Hash == hash[0])
	})
	return got
}

// AwaitNoContainer waits until device has no container of pod.
func (f *Fleet) AwaitNoContainer(t testing.TB, device, pod string) {
	t.Helper()
	f.AwaitContainers(t, device, time.Minute, "free of pod "+pod, func(cs []Container) bool {
		for _, c := range cs {
			if c.Pod == pod {
				return false
			}
		}
		return true
	})
}

// TaskPIDs maps "device/containerID" to the PID of the running task of
// every managed container of the devices (all agents' if none named).
func (f *Fleet) TaskPIDs(t testing.TB, devices ...string) map[string]uint32 {
	t.Helper()
	if len(devices) == 0 {
		devices = f.Devices()
	}
	out := map[string]uint32{}
	for _, d := range devices {
		for _, c := range f.Containers(t, d) {
			out[d+"/"+c.ID] = c.PID
		}
	}
	return out
}

// ContainerdEvent is one recorded containerd event.
type ContainerdEvent struct {
	Device string
	Topic  string // "/containers/create" or "/tasks/start"
	ID     string // container ID
	Seq    int    // position in the whole recording
}

// ContainerdEvents returns the container creations and task starts
// recorded in device's namespace since the fleet started.
func (f *Fleet) ContainerdEvents(device string) []ContainerdEvent {
	return f.events.of(AgentNamespace(device))
}

// containerdEvents records /containers/create and /tasks/start events of
// every namespace.
type containerdEvents struct {
	mu   sync.Mutex
	evs  []ContainerdEvent
	err  error
	stop context.CancelFunc
	done chan struct{}
}

const (
	topicContainerCreate = "/containers/create"
	topicTaskStart       = "/tasks/start"
	topicE2ESync         = "/fleet/e2e/sync"
)

// watchContainerd subscribes to the daemon's events and returns once the
// subscription is live (a marker published to syncNS came back).
func watchContainerd(t testing.TB, client *containerd.Client, syncNS string) *containerdEvents {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &containerdEvents{stop: cancel, done: make(chan struct{})}
	evC, errC := client.EventService().Subscribe(ctx,
		fmt.Sprintf(`topic==%q`, topicContainerCreate), fmt.Sprintf(`topic==%q`, topicTaskStart),
		fmt.Sprintf(`topic==%q`, topicE2ESync))
	synced := make(chan struct{})
	go func() {
		defer close(w.done)
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errC:
				if err != nil && ctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
				return
			case env := <-evC:
				if env.Topic == topicE2ESync {
					select {
					case <-synced:
					default:
						close(synced)
					}
					continue
				}
				v, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				ev := ContainerdEvent{Device: strings.TrimPrefix(env.Namespace, "fleet-"), Topic: env.Topic}
				switch e := v.(type) {
				case *eventstypes.ContainerCreate:
					ev.ID = e.ID
				case *eventstypes.TaskStart:
					ev.ID = e.ContainerID
				default:
					continue
				}
				w.mu.Lock()
				ev.Seq = len(w.evs)
				w.evs = append(w.evs, ev)
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	// containerd does not acknowledge a subscription: publish a marker
	// until it comes back.
	pctx := namespaces.WithNamespace(ctx, syncNS)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := client.EventService().Publish(pctx, topicE2ESync, wrapperspb.String("sync")); err != nil {
			t.Fatalf("publish containerd sync event: %v", err)
		}
		select {
		case <-synced:
			return w
		case <-w.done:
			t.Fatalf("containerd event stream ended: %v", w.err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd event subscription not live within 30s")
		}
	}
}

func (w *containerdEvents) of(namespace string) []ContainerdEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ContainerdEvent
	for _, e := range w.evs {
		if "fleet-"+e.Device == namespace {
			out = append(out, e)
		}
	}
	return out
}

// ---- hub and agents ---------------------------------------------------------------

// KillHub SIGKILLs fleet-hub.
func (f *Fleet) KillHub(t testing.TB) {
	t.Helper()
	f.Hub.Kill()
}

// RestartHub starts fleet-hub again on the same data directory (killing it
// first if it runs) and waits until it answers; on the embedded broker the
// MQTT port stays the same, so agents and proxies reconnect to it.
func (f *Fleet) RestartHub(t testing.TB) {
	t.Helper()
	f.Hub.Restart()
}

// StopHub stops fleet-hub cleanly (SIGTERM); StartHub after it.
func (f *Fleet) StopHub(t testing.TB) {
	t.Helper()
	if err := f.Hub.Stop(); err != nil {
		t.Fatalf("stop fleet-hub: %v", err)
	}
}

// StartHub starts a stopped fleet-hub on the same data directory.
func (f *Fleet) StartHub(t testing.TB) {
	t.Helper()
	if f.Hub.running() {
		t.Fatal("fleet-hub already runs")
	}
	f.Hub.start()
}

// KillAgent SIGKILLs the agent of device; its containers keep running.
func (f *Fleet) KillAgent(t testing.TB, device string) {
	t.Helper()
	f.Agent(t, device).Kill(t)
}

// RestartAgent starts the agent of device again (killing it first if it
// runs), with the same state directory.
func (f *Fleet) RestartAgent(t testing.TB, device string) {
	t.Helper()
	f.Agent(t, device).Restart(t)
}

// ---- Mosquitto accounts ----------------------------------------------------------

// SyncMosquittoAccounts makes Mosquitto enforce exactly the accounts and
// rules the hub serves: it writes the answers of GET /v1/mosquitto/passwd
// and /v1/mosquitto/acl into Mosquitto's files, as an operator would with
// `fleet-hub mosquitto-config`, and reloads it (SIGHUP). A no-op on the
// embedded broker.
func (f *Fleet) SyncMosquittoAccounts(t testing.TB) {
	t.Helper()
	if f.Mosquitto == nil {
		return
	}
	var files [2][]byte
	for i, p := range []string{"/v1/mosquitto/passwd", "/v1/mosquitto/acl"} {
		code, body, err := f.Request(context.Background(), http.MethodGet, p, nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", p, code, err, body)
		}
		files[i] = body
	}
	f.mu.Lock()
	for d := range f.tokens {
		if !bytes.Contains(files[0], []byte("\n"+d+":$7$")) {
			t.Errorf("GET /v1/mosquitto/passwd has no entry for device %s:\n%s", d, files[0])
		}
	}
	f.mu.Unlock()
	// One account of the harness's own beside the hub's: a publisher with
	// the hub's rights (InjectorMQTTAccount), so a test can play a buggy
	// or compromised publisher of desired states without logging in as
	// the hub (which, with one session per username, would take over the
	// hub's own session).
	hash, err := broker.MosquittoPasswordHash(f.hubPassword)
	if err != nil {
		t.Fatal(err)
	}
	files[0] = fmt.Appendf(files[0], "%s:%s\n", injectorUser, hash)
	files[1] = fmt.Appendf(files[1], "\n# e2e harness\nuser %s\ntopic readwrite %s/#\n", injectorUser, schema.DefaultTopicPrefix)
	for i, name := range []string{"passwd", "acl"} {
		if err := writeFileAtomic(filepath.Join(f.Mosquitto.Dir, name), files[i], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reloadMosquitto(t, f.Mosquitto)
}

// injectorUser is the harness's extra Mosquitto account, with the hub's
// rights.
const injectorUser = "e2e-injector"

// InjectorMQTTAccount is an account on Mosquitto with the hub's rights
// (read and write every Fleet topic) that is not the hub's: tests publish
// bad desired states with it. Empty on the embedded broker, where only the
// hub, in-process, may publish desired states.
func (f *Fleet) InjectorMQTTAccount() (username, password string) {
	if f.Mosquitto == nil {
		return "", ""
	}
	return injectorUser, f.hubPassword
}

// reloadMosquitto sends SIGHUP to the mosquitto process mosquittotest
// started on m.Dir and waits for it to log the reload.
func reloadMosquitto(t testing.TB, m *mosquittotest.Mosquitto) {
	t.Helper()
	pid, err := mosquittoPID(filepath.Join(m.Dir, "mosquitto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	before := strings.Count(m.Output(), "Reloading config")
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("reload mosquitto (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(m.Output(), "Reloading config") <= before {
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto did not reload within 10s:\n%s", m.Output())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// mosquittoPID finds the mosquitto process started with `-c conf`.
func mosquittoPID(conf string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 3 && filepath.Base(args[0]) == "mosquitto" && args[1] == "-c" && args[2] == conf {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no mosquitto process runs with -c %s", conf)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
