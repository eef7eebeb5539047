package test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/testimage"
)

// TestE2EJoinRefusesRogueFirstState: the rogue-broker threat of issue 39
// on a real external Mosquitto. Before a new device first connects, a
// rogue with publish rights on its desired topic (the harness's injector
// account) leaves a retained desired state there, validly signed by the
// rogue's own key, that runs an "evil" pod.
//
//   - join string: the device is started with exactly what `fleet device
//     add` printed (its `fleet-agent --join ...` line). It refuses the
//     rogue state (no evil container ever exists in containerd), then
//     accepts the real hub's state and converges.
//   - no signing key: the old-style command line without
//     --hub-signing-key runs nothing, neither the rogue's nor the hub's
//     state, and says why (log and status at the hub).
//   - insecure-trust-first-key: the old behaviour, the threat itself: the
//     device pins the rogue's key, runs the evil pod and refuses the real
//     hub.
//   - malformed join string: the agent exits with an error naming what is
//     wrong, before it stores or runs anything.
//   - wrong signing key in the join string: every state of the real hub
//     is refused; nothing runs.
func TestE2EJoinRefusesRogueFirstState(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, Broker: BrokerMosquitto, DevicePrefix: "joinhub"})
	user, pass := f.InjectorMQTTAccount()
	rogue := mustDialMQTT(t, f.BrokerURL, user, pass, dialOpts{clientID: user})
	_, rogueKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("join string", func(t *testing.T) {
		const dev = "join-pi"
		p := addDeviceAsPrinted(t, f, dev)
		publishRogueState(t, f, rogue, rogueKey, dev)
		a := StartAgent(t, AgentOptions{Device: dev, Join: joinArg(t, p.agentJoin), ContainerdSocket: f.Containerd.Socket()})
		// Whichever comes first: the refusal, or the rogue's pod.
		awaitf(t, time.Minute, func() bool {
			return strings.Contains(a.Logs(), "refused a desired state with a bad signature") || len(f.Containers(t, dev)) != 0
		}, "%s neither refused nor ran the rogue's retained state", dev)
		assertNoEvil(t, f, dev)
		a.AwaitLog(t, 0, "refused a desired state with a bad signature", time.Minute)
		awaitDeviceMessage(t, f, dev, "refused a desired state with a bad signature")
		assertNoEvil(t, f, dev)

		f.applyDeps(t, e2eDep{Name: "join-app", Selector: map[string]string{"join-case": dev}})
		f.deleteOnCleanup(t, "join-app")
		f.AwaitContainerRunning(t, dev, "join-app", f.PodHash(t, "join-app"))
		f.AwaitDevices(t, time.Minute, "converged, with no refusal left", func(d schema.Device) bool {
			return Converged(d) && d.Status.Message == ""
		}, dev)
		assertNoEvil(t, f, dev)
		if logs := a.Logs(); strings.Contains(logs, p.token) {
			t.Error("the agent logged its token")
		}
	})

	t.Run("no signing key", func(t *testing.T) {
		const dev = "oldstyle-pi"
		p := addDeviceAsPrinted(t, f, dev)
		// The rogue's state is the retained one when the device first
		// connects, as in the threat.
		publishRogueState(t, f, rogue, rogueKey, dev)
		// The command line fleet device add printed before the join
		// string, without --hub-signing-key.
		a := StartAgent(t, AgentOptions{Device: dev, Broker: f.BrokerURL, Token: p.token, ContainerdSocket: f.Containerd.Socket()})
		const why = "no hub signing key pinned: start the agent with --join"
		a.AwaitLog(t, 0, why, time.Minute)
		refusedOrRan := func(mark int, what string) {
			t.Helper()
			awaitf(t, time.Minute, func() bool {
				return strings.Contains(a.Logs()[mark:], "refused a desired state: "+why) || len(f.Containers(t, dev)) != 0
			}, "an agent with no signing key pinned neither refused nor ran %s", what)
			if cs := f.Containers(t, dev); len(cs) != 0 {
				t.Fatalf("an agent with no signing key pinned runs %+v (after %s)", cs, what)
			}
		}
		refusedOrRan(0, "the rogue's retained state")
		awaitDeviceMessage(t, f, dev, why)
		// The hub's own state is refused too: no key to check it by.
		mark := a.LogMark()
		f.applyDeps(t, e2eDep{Name: "old-app", Selector: map[string]string{"join-case": dev}})
		f.deleteOnCleanup(t, "old-app")
		refusedOrRan(mark, "the hub's state")
		if _, err := os.Stat(filepath.Join(a.StateDir, "hub-signing.pub")); err == nil {
			t.Error("a key was pinned")
		}
	})

	t.Run("insecure-trust-first-key", func(t *testing.T) {
		const dev = "tofu-pi"
		p := addDeviceAsPrinted(t, f, dev)
		publishRogueState(t, f, rogue, rogueKey, dev)
		a := StartAgent(t, AgentOptions{Device: dev, Broker: f.BrokerURL, Token: p.token, ContainerdSocket: f.Containerd.Socket(),
			Args: []string{"--insecure-trust-first-key"}})
		a.AwaitLog(t, 0, "pinned the hub's signing key "+schema.SigningKeyID(rogueKey.Public().(ed25519.PublicKey))+" on first use", time.Minute)
		f.AwaitContainerRunning(t, dev, "evil")
		// The real hub is refused from then on.
		f.applyDeps(t, e2eDep{Name: "tofu-app", Selector: map[string]string{"join-case": dev}})
		f.deleteOnCleanup(t, "tofu-app")
		a.AwaitLog(t, 0, "refused a desired state with a bad signature", time.Minute)
		f.AwaitContainerRunning(t, dev, "evil")
	})

	t.Run("malformed join string", func(t *testing.T) { e2eJoinMalformed(t, f) })
	t.Run("wrong signing key", func(t *testing.T) { e2eJoinWrongKey(t, f) })
}

// e2eJoinMalformed: a malformed join string stops the agent with an
// error naming what is wrong, before it stores or runs anything.
func e2eJoinMalformed(t *testing.T, f *Fleet) {
	p := addDeviceAsPrinted(t, f, "badjoin-pi")
	for name, tt := range map[string]struct{ join, want string }{
		"cut short":    {p.join[:len(p.join)/2], "--join: join string: "},
		"not a string": {"pi-1:" + p.token, "--join: join string: does not start with fleetjoin1:"},
		"no signing key": {schema.JoinPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"brokers":["`+f.BrokerURL+`"],"device":"badjoin-pi","token":"`+p.token+`"}`)),
			"--join: join string: signingKey: missing"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err, state := runAgentOnce(t, f, "--join", tt.join)
			if err == nil || !strings.Contains(out, tt.want) {
				t.Fatalf("fleet-agent --join (%s): %v, want an error with %q:\n%s", name, err, tt.want, out)
			}
			if strings.Contains(out, p.token) {
				t.Errorf("the error shows the token:\n%s", out)
			}
			if entries, _ := os.ReadDir(state); len(entries) != 0 {
				t.Errorf("the state dir holds %d entries after the refusal", len(entries))
			}
		})
	}
	if cs := f.Containers(t, "badjoin-pi"); len(cs) != 0 {
		t.Fatalf("containers %+v", cs)
	}
}

// e2eJoinWrongKey: a join string with another signing key than the
// hub's: every state of the real hub is refused; nothing runs.
func e2eJoinWrongKey(t *testing.T, f *Fleet) {
	const dev = "wrongkey-pi"
	p := addDeviceAsPrinted(t, f, dev)
	f.applyDeps(t, e2eDep{Name: "wrongkey-app", Selector: map[string]string{"join-case": dev}})
	f.deleteOnCleanup(t, "wrongkey-app")
	j, err := schema.ParseJoin(p.join)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	j.SigningKey = schema.EncodeSigningKey(other)
	wrong, err := schema.EncodeJoin(j)
	if err != nil {
		t.Fatal(err)
	}
	a := StartAgent(t, AgentOptions{Device: dev, Join: wrong, ContainerdSocket: f.Containerd.Socket()})
	a.AwaitLog(t, 0, "refused a desired state with a bad signature", time.Minute)
	awaitDeviceMessage(t, f, dev, "refused a desired state with a bad signature")
	if cs := f.Containers(t, dev); len(cs) != 0 {
		t.Fatalf("an agent pinning another key runs %+v", cs)
	}
}

// printedDevice is what `fleet device add` printed for a device.
type printedDevice struct {
	token string
	join  string
	// agentJoin is the printed "fleet-agent --join ..." line.
	agentJoin string
}

// addDeviceAsPrinted runs `fleet device add NAME --label join-case=NAME`
// (the human output, as an operator sees it), gives its token to
// Mosquitto and imports the test image into its namespace.
func addDeviceAsPrinted(t *testing.T, f *Fleet, name string) printedDevice {
	t.Helper()
	out := f.CLI(t, "device", "add", name, "--label", "join-case="+name)
	var p printedDevice
	for _, l := range strings.Split(out, "\n") {
		switch l = strings.TrimSpace(l); {
		case strings.HasPrefix(l, "Token (shown once, store it safely): "):
			p.token = strings.TrimPrefix(l, "Token (shown once, store it safely): ")
		case strings.HasPrefix(l, schema.JoinPrefix):
			p.join = l
		case strings.HasPrefix(l, "fleet-agent --join "):
			p.agentJoin = l
		}
	}
	if p.token == "" || p.join == "" || p.agentJoin == "" {
		t.Fatalf("fleet device add %s printed no token, join string or agent line:\n%s", name, out)
	}
	f.mu.Lock()
	f.tokens[name] = p.token
	f.mu.Unlock()
	f.SyncMosquittoAccounts(t)
	tarPath, _ := testimage.Build(t, testimage.Options{})
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(t.Context(), AgentNamespace(name)), 2*time.Minute)
	defer cancel()
	if _, err := testimage.Import(ctx, f.Containerd.Client(), tarPath, ""); err != nil {
		t.Fatalf("import the test image for %s: %v", name, err)
	}
	return p
}

// joinArg is the join string of a printed "fleet-agent --join STRING"
// line, which must take no other argument.
func joinArg(t *testing.T, line string) string {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) != 3 || fields[0] != "fleet-agent" || fields[1] != "--join" {
		t.Fatalf("the printed agent line is not `fleet-agent --join STRING`: %q", line)
	}
	return fields[2]
}

// publishRogueState leaves a retained desired state on device's topic,
// signed by the rogue's own key, that runs an "evil" pod: valid in every
// other way, and newer than anything the hub sent.
func publishRogueState(t *testing.T, f *Fleet, rogue *mqttClient, key ed25519.PrivateKey, device string) {
	t.Helper()
	ds := schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   device, Generation: 1000, Store: "rogue-store",
		Pods: []schema.Pod{{Name: "evil", Spec: schema.PodSpec{Containers: []schema.Container{{Name: "app", Image: f.Image, Args: []string{"sleep", "forever"}, Env: []schema.EnvVar{{Name: "ROGUE", Value: "1"}}}}}}},
	}
	if err := schema.ValidateDesiredState(&ds); err != nil {
		t.Fatalf("the rogue state would not even validate: %v", err)
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := schema.SignDesiredState(raw, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	topic := topics.Device(device, schema.TopicDesired)
	rogue.mustPublish(topic, true, signed)
	// The rogue's message is the retained one before the device connects.
	probe := mustDialMQTT(t, f.BrokerURL, "e2e-injector", f.hubPassword, dialOpts{clientID: "e2e-injector-probe-" + device})
	probe.subscribe(topic)
	probe.await("the rogue's retained state", func(m mqttMsg) bool {
		return m.Topic == topic && m.Retained && strings.Contains(string(m.Payload), `"rogue-store"`)
	})
}

// assertNoEvil fails t if device has, or containerd ever saw, a
// container of the rogue's pod.
func assertNoEvil(t *testing.T, f *Fleet, device string) {
	t.Helper()
	for _, c := range f.Containers(t, device) {
		if c.Pod == "evil" {
			t.Fatalf("%s runs the rogue's pod: %+v", device, c)
		}
	}
}

// awaitDeviceMessage waits until the hub shows msg in device's status.
func awaitDeviceMessage(t *testing.T, f *Fleet, device, msg string) {
	t.Helper()
	awaitf(t, time.Minute, func() bool {
		d := f.Device(t, device)
		return d.Status != nil && strings.Contains(d.Status.Message, msg)
	}, "the hub does not show %s's status message %q", device, msg)
}

// runAgentOnce runs fleet-agent with args and a fresh state directory
// until it exits (a minute at most), and returns its output, its exit
// error and the state directory.
func runAgentOnce(t *testing.T, f *Fleet, args ...string) (string, error, string) {
	t.Helper()
	bin, err := BuildBinary("fleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--state-dir", state, "--containerd-socket", f.Containerd.Socket())...)
	cmd.Env = cleanEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err, state
}

// TestE2EJoinBootstrapTLS: the join string `fleet token create` prints
// carries the bootstrap token, the hub's TLS broker (an IP address), its
// CA hash and its signing key: an agent started with it and nothing else
// (but --device) verifies the hub's certificate by the hash, enrolls,
// pins the key before any desired state and converges on the token's
// labels' deployment.
func TestE2EJoinBootstrapTLS(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 1, DevicePrefix: "bootjoin"})
	out := f.CLI(t, "token", "create", "--label", "join-case=boot", "--uses", "1")
	var agentLine string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "fleet-agent --join ") {
			agentLine = l
		}
	}
	fields := strings.Fields(agentLine)
	if len(fields) != 5 || fields[3] != "--name-from" {
		t.Fatalf("fleet token create printed no `fleet-agent --join STRING --name-from SOURCE` line:\n%s", out)
	}
	j, err := schema.ParseJoin(fields[2])
	if err != nil {
		t.Fatal(err)
	}
	if j.BootstrapToken == "" || j.CAHash != f.Hub.CAHash || j.SigningKey != f.Hub.SigningKey || !strings.HasPrefix(j.Brokers[0], "ssl://127.0.0.1:") {
		t.Fatalf("the join string carries %+v", j)
	}
	// Bad input first: a wrong CA hash, in the join string or as
	// --ca-hash, against the real hub. The bootstrap token has one use;
	// the enrollment after this proves none was spent.
	e2eJoinWrongCAHash(t, f, j)

	const dev = "boot-pi"
	tarPath, _ := testimage.Build(t, testimage.Options{})
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(t.Context(), AgentNamespace(dev)), 2*time.Minute)
	defer cancel()
	if _, err := testimage.Import(ctx, f.Containerd.Client(), tarPath, ""); err != nil {
		t.Fatal(err)
	}
	f.applyDeps(t, e2eDep{Name: "boot-app", Selector: map[string]string{"join-case": "boot"}})
	a := StartAgent(t, AgentOptions{Device: dev, Join: fields[2], ContainerdSocket: f.Containerd.Socket(), Args: []string{"--device", dev}})
	a.AwaitLog(t, 0, "verified the hub's CA against --ca-hash and saved it", time.Minute)
	a.AwaitLog(t, 0, "pinned the hub's signing key", time.Minute)
	f.AwaitContainerRunning(t, dev, "boot-app", f.PodHash(t, "boot-app"))
	f.AwaitConverged(t, time.Minute, dev)
	if strings.Contains(a.Logs(), j.BootstrapToken) {
		t.Error("the agent logged the bootstrap token")
	}
}

// e2eJoinWrongCAHash: an agent given the hub's real TLS broker but a CA
// hash of another CA (in the join string, or as --ca-hash beside the
// bootstrap token) refuses the hub's certificate with an error naming the
// pinned hash, enrolls nothing, stores no token and no CA, and spends no
// use of the bootstrap token.
func e2eJoinWrongCAHash(t *testing.T, f *Fleet, j schema.JoinInfo) {
	t.Helper()
	sum := sha256.Sum256([]byte("not the hub's CA"))
	wrongHash := "sha256:" + hex.EncodeToString(sum[:])
	bad := j
	bad.CAHash = wrongHash
	wrongJoin, err := schema.EncodeJoin(bad)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts AgentOptions
	}{
		{"join string", AgentOptions{Device: "badca-join", Join: wrongJoin, Args: []string{"--device", "badca-join"}}},
		{"--ca-hash", AgentOptions{Device: "badca-flag", Broker: j.Brokers[0], BootstrapToken: j.BootstrapToken, Args: []string{"--ca-hash", wrongHash}}},
	} {
		c.opts.ContainerdSocket = f.Containerd.Socket()
		a := StartAgent(t, c.opts)
		refused := a.AwaitLog(t, 0, "pinned CA "+wrongHash, time.Minute)
		if !strings.Contains(refused, enroll.ErrCAMismatch.Error()) {
			t.Errorf("%s: the refusal does not say why: %s", c.name, refused)
		}
		if err := a.Stop(); err != nil {
			t.Errorf("%s: stop the agent: %v", c.name, err)
		}
		for _, name := range []string{enroll.TokenFile, enroll.CAFile} {
			if _, err := os.Stat(filepath.Join(a.StateDir, name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: after the refusal the state dir has %s: %v", c.name, name, err)
			}
		}
		if code, _ := f.Hub.Do(t, http.MethodGet, "/v1/devices/"+c.opts.Device, nil); code != http.StatusNotFound {
			t.Errorf("%s: GET device %s after the refusal: %d, want 404", c.name, c.opts.Device, code)
		}
		if strings.Contains(a.Logs(), j.BootstrapToken) {
			t.Errorf("%s: the agent logged the bootstrap token", c.name)
		}
	}
	for id, bt := range bootstrapTokens(t, f.Hub) {
		if bt.Used != 0 {
			t.Errorf("bootstrap token %s: %d uses spent by refused agents", id, bt.Used)
		}
	}
}
