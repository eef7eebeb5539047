package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/edgeagent"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// Self-enrollment end to end: a real fleet-hub process, real TCP, the
// fleet CLI for bootstrap tokens, and the agent's enrollment client
// (edgeagent/enroll, what fleet-agent --bootstrap-token-file runs).

// enrollCLI runs the fleet CLI against h and returns stdout; it fails t
// on a non-zero exit.
func enrollCLI(t *testing.T, h *Hub, args ...string) string {
	t.Helper()
	bin, err := BuildBinary("fleet")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(t.TempDir()), "FLEET_HUB="+h.URL, "FLEET_TOKEN="+h.Token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fleet %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// createBootstrap runs `fleet token create ARGS -o json`.
func createBootstrap(t *testing.T, h *Hub, args ...string) schema.BootstrapToken {
	t.Helper()
	out := enrollCLI(t, h, append([]string{"token", "create", "-o", "json"}, args...)...)
	var bt schema.BootstrapToken
	if err := json.Unmarshal([]byte(out), &bt); err != nil || bt.Token == "" {
		t.Fatalf("fleet token create: %v: %s", err, out)
	}
	return bt
}

func bootstrapTokens(t *testing.T, h *Hub) map[string]schema.BootstrapToken {
	t.Helper()
	var list schema.BootstrapTokenList
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/bootstrap-tokens", nil, http.StatusOK), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]schema.BootstrapToken{}
	for _, bt := range list.Items {
		out[bt.ID] = bt
	}
	return out
}

func enrollOpts(h *Hub, token, device, stateDir string) enroll.Options {
	// The hub's key, as a join string gives it: over plain MQTT the
	// enrollment answer's key is pinned only when it is this one.
	key, _ := schema.ParseSigningKey(h.SigningKey)
	return enroll.Options{
		Broker: h.MQTTURL, BootstrapToken: token, Device: device, StateDir: stateDir,
		Timeout: 20 * time.Second, SigningKey: key,
	}
}

func enrollCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// refusal returns the hub's refusal reason of err, or fails t.
func refusal(t *testing.T, err error) *enroll.RefusedError {
	t.Helper()
	var ref *enroll.RefusedError
	if !errors.As(err, &ref) {
		t.Fatalf("err = %v, want a refusal from the hub", err)
	}
	return ref
}

// TestEnrollFiftyDevices: 50 devices enroll at once with one bootstrap
// token of 50 uses; each gets its own working token and the token's
// labels; the 51st is refused.
func TestEnrollFiftyDevices(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	bt := createBootstrap(t, h, "--label", "site=north", "--ttl", "24h", "--uses", "50")
	ctx := enrollCtx(t)

	const n = 50
	ids := make([]enroll.Identity, n)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		wg.Go(func() {
			id, err := enroll.Enroll(ctx, enrollOpts(h, bt.Token, fmt.Sprintf("north-%02d", i), t.TempDir()))
			if err != nil {
				failed.Add(1)
				t.Errorf("device %d: %v", i, err)
				return
			}
			ids[i] = id
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}

	// Every token is the device's own and works: the device connects
	// and reads its desired state (and only its own name works with it).
	seen := map[string]bool{}
	for i, id := range ids {
		if seen[id.Token] {
			t.Fatalf("device %d got a token another device has", i)
		}
		seen[id.Token] = true
		c := mustDialMQTT(t, h.MQTTURL, id.Device, id.Token, dialOpts{})
		if code := c.subscribe(topics.Device(id.Device, schema.TopicDesired)); code != 1 {
			t.Fatalf("%s: SUBACK %#x", id.Device, code)
		}
		c.awaitDesired(id.Device, func(ds schema.DesiredState) bool { return ds.Device == id.Device })
		c.c.Disconnect(0)
	}
	if _, err := dialMQTT(t, h.MQTTURL, ids[1].Device, ids[0].Token, dialOpts{}); err == nil {
		t.Error("a device's token works for another device")
	}

	var devs schema.DeviceList
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/devices?labelSelector=site=north", nil, http.StatusOK), &devs); err != nil {
		t.Fatal(err)
	}
	if len(devs.Items) != n {
		t.Errorf("%d devices carry site=north, want %d", len(devs.Items), n)
	}

	_, err := enroll.Enroll(ctx, enrollOpts(h, bt.Token, "north-50", t.TempDir()))
	if ref := refusal(t, err); ref.Reason != schema.EnrollUsedUp || !strings.Contains(err.Error(), "used up") {
		t.Errorf("51st enrollment: %v", err)
	}
	if got := bootstrapTokens(t, h)[bt.ID]; got.Used != n || got.Status != schema.BootstrapUsedUp {
		t.Errorf("token after 51 attempts: %+v", got)
	}
	if out := enrollCLI(t, h, "token", "list"); !strings.Contains(out, "UsedUp") || !strings.Contains(out, "50/50") {
		t.Errorf("fleet token list:\n%s", out)
	}
	if logs := h.Logs(); strings.Contains(logs, bt.Token) || strings.Contains(logs, ids[0].Token) {
		t.Error("the hub logged a token")
	}
}

// TestEnrollAnswerIsolation: a bootstrap client can neither subscribe to
// another request's answer nor receive it, nor take over its request ID.
func TestEnrollAnswerIsolation(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	bt := createBootstrap(t, h, "--uses", "5")
	user := schema.BootstrapUsername(bt.ID)
	const reqA, reqB = "req_isolation-aaaaaaaa", "req_isolation-bbbbbbbb"

	eve := mustDialMQTT(t, h.MQTTURL, user, bt.Token, dialOpts{clientID: reqA})
	for _, f := range []string{
		topics.Enroll(reqB, schema.TopicEnrollResponse),
		topics.Enroll("+", schema.TopicEnrollResponse),
		"fleet/v1/enroll/#",
		"#",
		topics.DeviceFilter(schema.TopicDesired),
	} {
		if code := eve.subscribe(f); code != 0x80 {
			t.Errorf("bootstrap client subscribed to %s (SUBACK %#x)", f, code)
		}
	}
	if code := eve.subscribe(topics.Enroll(reqA, schema.TopicEnrollResponse)); code != 1 {
		t.Fatalf("own answer topic: SUBACK %#x", code)
	}
	// Nobody takes over a request ID in use, not even with the same
	// bootstrap token.
	if _, err := dialMQTT(t, h.MQTTURL, user, bt.Token, dialOpts{clientID: reqA}); err == nil {
		t.Error("a second bootstrap client took over a request ID in use")
	}

	bob := mustDialMQTT(t, h.MQTTURL, user, bt.Token, dialOpts{clientID: reqB})
	if code := bob.subscribe(topics.Enroll(reqB, schema.TopicEnrollResponse)); code != 1 {
		t.Fatalf("bob's answer topic: SUBACK %#x", code)
	}
	send := func(c *mqttClient, req, device string) schema.EnrollResponse {
		t.Helper()
		b, _ := json.Marshal(schema.EnrollRequest{Token: bt.Token, Secret: strings.Repeat("s", 43), Device: device})
		c.mustPublish(topics.Enroll(req, schema.TopicEnrollRequest), false, b)
		m := c.await("enrollment answer", func(m mqttMsg) bool { return m.Topic == topics.Enroll(req, schema.TopicEnrollResponse) })
		var resp schema.EnrollResponse
		if err := json.Unmarshal(m.Payload, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := send(bob, reqB, "bob-device"); resp.Token == "" {
		t.Fatalf("bob: %+v", resp)
	}
	// Eve's own answer comes after bob's was published; bob's never
	// reaches her.
	if resp := send(eve, reqA, "eve-device"); resp.Token == "" {
		t.Fatalf("eve: %+v", resp)
	}
	for _, m := range eve.received() {
		if m.Topic != topics.Enroll(reqA, schema.TopicEnrollResponse) {
			t.Errorf("eve received %s", m.Topic)
		}
	}
	// Publishing on bob's request topic costs eve her connection (a
	// denied QoS 1 publish) and reaches no one.
	_ = eve.publish(topics.Enroll(reqB, schema.TopicEnrollRequest), 1, false, []byte(`{}`))
	eve.awaitLost(mqttWait)
}

// TestEnrollExpiredToken: a token past its TTL is refused with a clear
// reason. The expiry is the hub's clock: the test polls the hub until it
// reports the token expired.
func TestEnrollExpiredToken(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	bt := createBootstrap(t, h, "--ttl", "1s")
	awaitf(t, 30*time.Second, func() bool { return bootstrapTokens(t, h)[bt.ID].Status == schema.BootstrapExpired },
		"bootstrap token %s expired", bt.ID)
	_, err := enroll.Run(enrollCtx(t), enrollOpts(h, bt.Token, "late", t.TempDir()))
	if ref := refusal(t, err); ref.Reason != schema.EnrollExpired || !strings.Contains(ref.Message, "expired at") {
		t.Errorf("enroll with an expired token: %v", err)
	}
	code, _ := h.Do(t, http.MethodGet, "/v1/devices/late", nil)
	if code != http.StatusNotFound {
		t.Errorf("a device was created with an expired token: %d", code)
	}
	// A deleted token is refused by the broker itself.
	enrollCLI(t, h, "token", "delete", bt.ID)
	if _, err := enroll.Enroll(enrollCtx(t), enrollOpts(h, bt.Token, "late", t.TempDir())); !errors.Is(err, enroll.ErrBrokerRefused) {
		t.Errorf("enroll with a deleted token: %v", err)
	}
}

// TestEnrollSameName: enrollment never takes over an existing device and
// never issues a second token for a name; of two devices racing for one
// name, exactly one wins.
func TestEnrollSameName(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	bt := createBootstrap(t, h, "--uses", "10")
	ctx := enrollCtx(t)

	owner := addDevice(t, h, "taken", map[string]string{"site": "lab"})
	_, err := enroll.Enroll(ctx, enrollOpts(h, bt.Token, "taken", t.TempDir()))
	if ref := refusal(t, err); ref.Reason != schema.EnrollNameTaken {
		t.Errorf("enroll as an existing device: %v", err)
	}
	// The owner's token still works; its labels are untouched.
	mustDialMQTT(t, h.MQTTURL, "taken", owner, dialOpts{})
	if d := getDevice(t, h, "taken"); d.Metadata.Labels["site"] != "lab" {
		t.Errorf("existing device changed: %+v", d.Metadata)
	}

	type result struct {
		id  enroll.Identity
		err error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			id, err := enroll.Enroll(ctx, enrollOpts(h, bt.Token, "twin", t.TempDir()))
			results <- result{id, err}
		}()
	}
	var won []enroll.Identity
	for range 2 {
		r := <-results
		if r.err == nil {
			won = append(won, r.id)
		} else if ref := refusal(t, r.err); ref.Reason != schema.EnrollNameTaken {
			t.Errorf("loser: %v", r.err)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d of 2 devices racing for one name enrolled, want 1", len(won))
	}
	mustDialMQTT(t, h.MQTTURL, "twin", won[0].Token, dialOpts{})
	if got := bootstrapTokens(t, h)[bt.ID]; got.Used != 1 {
		t.Errorf("refused enrollments spent uses: %+v", got)
	}
}

// TestEnrollRestartUsesStoredToken: an enrolled agent, restarted, runs on
// the token it saved and never uses the bootstrap token again, which is
// deleted to prove it; the real fleet-agent process does the same.
func TestEnrollRestartUsesStoredToken(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	bt := createBootstrap(t, h, "--label", "site=north", "--uses", "2")
	ctx := enrollCtx(t)

	t.Run("in-process agent", func(t *testing.T) {
		dir := t.TempDir()
		o := enrollOpts(h, bt.Token, "hollow-1", dir)
		first, enrolled, err := enroll.Ensure(ctx, o)
		if err != nil || !enrolled {
			t.Fatalf("first start: %v", err)
		}
		// Restart after the bootstrap token is gone: Ensure must not need it.
		o.BootstrapToken = ""
		id, enrolled, err := enroll.Ensure(ctx, o)
		if err != nil || enrolled || id != first {
			t.Fatalf("restart: %+v enrolled=%v err=%v", id, enrolled, err)
		}
		agent, err := edgeagent.New(edgeagent.Options{
			Device: id.Device, Broker: h.MQTTURL, Token: id.Token, StateDir: dir,
			Runtime: runtime.NewFake(runtime.FakeOptions{}), NodeInfo: func() *schema.NodeInfo { return &schema.NodeInfo{} },
		})
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- agent.Run(actx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		}()
		awaitf(t, 30*time.Second, func() bool {
			d := getDevice(t, h, id.Device)
			return d.Status != nil && d.Status.Online && d.Status.Converged
		}, "enrolled agent %s online and converged", id.Device)
	})

	t.Run("fleet-agent process", func(t *testing.T) {
		bin, err := BuildBinary("fleet-agent")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		tokenFile := filepath.Join(dir, "bootstrap-token")
		if err := os.WriteFile(tokenFile, []byte(bt.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stateDir := filepath.Join(dir, "state")
		// No containerd here: the agent settles its identity (enrolls, or
		// reads the saved token) before it connects to containerd, which
		// is all this test needs of it. A socket path under a regular file
		// fails at once (ENOTDIR), so the agent waits in its retry backoff,
		// which SIGTERM ends at once, not in a 10 s dial.
		args := []string{"--broker", h.MQTTURL, "--bootstrap-token-file", tokenFile, "--device", "proc-1",
			"--state-dir", stateDir, "--containerd-socket", filepath.Join(tokenFile, "containerd.sock")}
		start := func() (*exec.Cmd, *lockedBuffer) {
			logs := &lockedBuffer{}
			cmd := exec.Command(bin, args...)
			cmd.Env = cleanEnv(dir)
			cmd.Stdout, cmd.Stderr = logs, logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return cmd, logs
		}
		stop := func(cmd *exec.Cmd, logs *lockedBuffer) {
			t.Helper()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("fleet-agent exit: %v\n%s", err, logs)
			}
		}

		cmd, logs := start()
		awaitf(t, 60*time.Second, func() bool { return strings.Contains(logs.String(), "enrolled; device token saved") },
			"fleet-agent enrolled; log:\n%s", logs)
		stop(cmd, logs)
		fi, err := os.Stat(filepath.Join(stateDir, enroll.TokenFile))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("saved token: %v %v, want mode 0600", fi, err)
		}
		saved, err := enroll.Stored(stateDir)
		if err != nil || saved.Device != "proc-1" || !strings.Contains(logs.String(), "enrolled; device token saved") {
			t.Fatalf("after the first start: %+v %v\n%s", saved, err, logs)
		}
		if strings.Contains(logs.String(), bt.Token) || strings.Contains(logs.String(), saved.Token) {
			t.Error("fleet-agent logged a token")
		}
		if d := getDevice(t, h, "proc-1"); d.Metadata.Labels["site"] != "north" {
			t.Errorf("enrolled device labels %v", d.Metadata.Labels)
		}

		// Delete the bootstrap token: a restarted agent that tried it
		// would be refused.
		enrollCLI(t, h, "token", "delete", bt.ID)
		cmd, logs = start()
		awaitf(t, 60*time.Second, func() bool { return strings.Contains(logs.String(), "using the device token saved at enrollment") },
			"restarted fleet-agent found its saved token; log:\n%s", logs)
		stop(cmd, logs)
		out := logs.String()
		if !strings.Contains(out, "using the device token saved at enrollment") || strings.Contains(out, "enrolling with the hub") {
			t.Errorf("restarted agent did not use its saved token:\n%s", out)
		}
		if again, err := enroll.Stored(stateDir); err != nil || again != saved {
			t.Errorf("the saved identity changed: %+v %v", again, err)
		}
		if n := strings.Count(h.Logs(), "device enrolled"); n != 2 {
			t.Errorf("the hub enrolled %d devices, want 2 (hollow-1, proc-1 once)", n)
		}
	})
}

// TestEnrollThroughMosquitto: with an external Mosquitto configured from
// the generated files, a device enrolls the same way, and its new token
// works there once the accounts are rendered again.
func TestEnrollThroughMosquitto(t *testing.T) {
	t.Parallel()
	hubAcct := broker.MosquittoAccount{Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: "hub-password-for-the-enroll-test-0123456789"}
	m := mosquittotest.Start(t, mosquittotest.Config{Accounts: []broker.MosquittoAccount{hubAcct}})
	h := StartHub(t, HubOptions{Args: []string{"--broker", m.URL, "--broker-password-file", writeSecret(t, hubAcct.Password)}})
	bt := createBootstrap(t, h, "--label", "site=ext", "--uses", "1")
	boot := broker.MosquittoAccount{Identity: broker.Identity{Name: schema.BootstrapUsername(bt.ID), Role: broker.RoleBootstrap}, Password: bt.Token}
	m.SetAccounts(t, []broker.MosquittoAccount{hubAcct, boot})

	// The hub may still be connecting to Mosquitto: Run retries the same
	// request until the hub answers it.
	o := enrollOpts(h, bt.Token, "ext-1", t.TempDir())
	o.Broker, o.Timeout = m.URL, 5*time.Second
	id, err := enroll.Run(enrollCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if d := getDevice(t, h, "ext-1"); d.Metadata.Labels["site"] != "ext" {
		t.Errorf("enrolled device labels %v", d.Metadata.Labels)
	}
	m.SetAccounts(t, []broker.MosquittoAccount{hubAcct, boot,
		{Identity: broker.Identity{Name: id.Device, Role: broker.RoleDevice}, Password: id.Token}})
	c := mustDialMQTT(t, m.URL, id.Device, id.Token, dialOpts{})
	c.subscribe(topics.Device(id.Device, schema.TopicDesired))
	c.awaitDesired(id.Device, func(ds schema.DesiredState) bool { return ds.Device == id.Device })

	o = enrollOpts(h, bt.Token, "ext-2", t.TempDir())
	o.Broker = m.URL
	_, err = enroll.Run(enrollCtx(t), o)
	if ref := refusal(t, err); ref.Reason != schema.EnrollUsedUp {
		t.Errorf("second enrollment with a 1-use token: %v", err)
	}
}
