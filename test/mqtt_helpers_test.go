package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/schema"
)

// mqttWait bounds every wait for something that should happen over MQTT.
const mqttWait = 15 * time.Second

var topics schema.Topics

// mqttMsg is one PUBLISH received by a test client.
type mqttMsg struct {
	Topic    string
	Payload  []byte
	Retained bool
}

// mqttClient is a plain paho MQTT 3.1.1 client over TCP, as a device or a
// monitor would use, that records what it receives.
type mqttClient struct {
	t    testing.TB
	name string
	c    paho.Client

	mu    sync.Mutex
	msgs  []mqttMsg
	wake  chan struct{}
	lost  chan error
	onMsg func(mqttMsg)
}

type dialOpts struct {
	clientID string
	will     *mqttMsg
}

// dialMQTT connects; it returns the CONNECT error (refused credentials…).
func dialMQTT(t testing.TB, url, username, password string, o dialOpts) (*mqttClient, error) {
	t.Helper()
	cl := &mqttClient{t: t, name: username, wake: make(chan struct{}, 1), lost: make(chan error, 1)}
	if o.clientID == "" {
		// A device's own shape (broker.DeviceClientID); any client
		// may use it.
		o.clientID = fmt.Sprintf("%s-%016x", username, time.Now().UnixNano())
	}
	po := paho.NewClientOptions().
		AddBroker(url).
		SetClientID(o.clientID).
		SetUsername(username).
		SetPassword(password).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetOrderMatters(false).
		SetConnectTimeout(10 * time.Second).
		SetWriteTimeout(10 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { cl.record(m) }).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case cl.lost <- err:
			default:
			}
		})
	if o.will != nil {
		po.SetWill(o.will.Topic, string(o.will.Payload), 1, o.will.Retained)
	}
	cl.c = paho.NewClient(po)
	tok := cl.c.Connect()
	if !tok.WaitTimeout(mqttWait) {
		return nil, errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { cl.c.Disconnect(0) })
	return cl, nil
}

func mustDialMQTT(t testing.TB, url, username, password string, o dialOpts) *mqttClient {
	t.Helper()
	cl, err := dialMQTT(t, url, username, password, o)
	if err != nil {
		t.Fatalf("connect %s as %s: %v", url, username, err)
	}
	return cl
}

func (c *mqttClient) record(m paho.Message) {
	msg := mqttMsg{Topic: m.Topic(), Payload: append([]byte(nil), m.Payload()...), Retained: m.Retained()}
	c.mu.Lock()
	c.msgs = append(c.msgs, msg)
	f := c.onMsg
	c.mu.Unlock()
	if f != nil {
		f(msg)
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// subscribe subscribes with QoS 1 and returns the SUBACK code (0x80:
// refused).
func (c *mqttClient) subscribe(filter string) byte {
	c.t.Helper()
	tok := c.c.Subscribe(filter, 1, nil)
	if !tok.WaitTimeout(mqttWait) {
		c.t.Fatalf("%s: subscribe %s timed out", c.name, filter)
	}
	if err := tok.Error(); err != nil {
		c.t.Fatalf("%s: subscribe %s: %v", c.name, filter, err)
	}
	return tok.(*paho.SubscribeToken).Result()[filter]
}

func (c *mqttClient) publish(topic string, qos byte, retained bool, payload []byte) error {
	tok := c.c.Publish(topic, qos, retained, payload)
	if !tok.WaitTimeout(mqttWait) {
		return fmt.Errorf("%s: publish %s timed out", c.name, topic)
	}
	return tok.Error()
}

func (c *mqttClient) mustPublish(topic string, retained bool, payload []byte) {
	c.t.Helper()
	if err := c.publish(topic, 1, retained, payload); err != nil {
		c.t.Fatal(err)
	}
}

// received returns the messages so far.
func (c *mqttClient) received() []mqttMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]mqttMsg(nil), c.msgs...)
}

// await waits for a message matching pred and returns it.
func (c *mqttClient) await(what string, pred func(mqttMsg) bool) mqttMsg {
	c.t.Helper()
	deadline := time.NewTimer(mqttWait)
	defer deadline.Stop()
	seen := 0
	for {
		msgs := c.received()
		for _, m := range msgs[seen:] {
			if pred(m) {
				return m
			}
		}
		seen = len(msgs)
		select {
		case <-c.wake:
		case <-deadline.C:
			c.t.Fatalf("%s: no message %s within %v (got %d messages)", c.name, what, mqttWait, seen)
		}
	}
}

// awaitDesired waits for a DesiredState on topic that satisfies pred.
func (c *mqttClient) awaitDesired(device string, pred func(schema.DesiredState) bool) schema.DesiredState {
	c.t.Helper()
	var ds schema.DesiredState
	c.await("desired state of "+device, func(m mqttMsg) bool {
		if m.Topic != topics.Device(device, schema.TopicDesired) || len(m.Payload) == 0 {
			return false
		}
		var got schema.DesiredState
		if err := json.Unmarshal(m.Payload, &got); err != nil {
			c.t.Fatalf("%s: desired state does not decode: %v: %s", c.name, err, m.Payload)
		}
		if pred(got) {
			ds = got
			return true
		}
		return false
	})
	return ds
}

// awaitLost waits for the connection to be closed by the broker.
func (c *mqttClient) awaitLost(within time.Duration) {
	c.t.Helper()
	select {
	case <-c.lost:
	case <-time.After(within):
		if c.c.IsConnectionOpen() {
			c.t.Fatalf("%s: still connected after %v", c.name, within)
		}
	}
}

// awaitf polls cond until it holds or the deadline passes.
func awaitf(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: "+format, append([]any{within}, args...)...)
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not synchronisation
	}
}

// ---- hub API helpers ----------------------------------------------------------

func mustDo(t testing.TB, h *Hub, method, path string, body []byte, want int) []byte {
	t.Helper()
	code, b := h.Do(t, method, path, body)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	return b
}

func applyYAML(t testing.TB, h *Hub, yaml string) schema.ApplyResponse {
	t.Helper()
	var resp schema.ApplyResponse
	if err := json.Unmarshal(mustDo(t, h, http.MethodPost, "/v1/apply", []byte(yaml), http.StatusOK), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func deviceYAML(name string, labels map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: %q\n", name)
	if len(labels) > 0 {
		b.WriteString("  labels:\n")
		for k, v := range labels {
			fmt.Fprintf(&b, "    %s: %q\n", k, v)
		}
	}
	return b.String()
}

func webYAML(name, image string, match map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: fleet/v1\nkind: Deployment\nmetadata:\n  name: %q\nspec:\n  selector:\n    matchLabels:\n", name)
	for k, v := range match {
		fmt.Fprintf(&b, "      %s: %q\n", k, v)
	}
	fmt.Fprintf(&b, "  template:\n    spec:\n      containers:\n      - name: app\n        image: %s\n", image)
	return b.String()
}

// addDevice creates a device and returns its token.
func addDevice(t testing.TB, h *Hub, name string, labels map[string]string) string {
	t.Helper()
	applyYAML(t, h, deviceYAML(name, labels))
	return issueToken(t, h, name)
}

func issueToken(t testing.TB, h *Hub, name string) string {
	t.Helper()
	var cred schema.DeviceCredentials
	if err := json.Unmarshal(mustDo(t, h, http.MethodPost, "/v1/devices/"+name+"/token", nil, http.StatusOK), &cred); err != nil {
		t.Fatal(err)
	}
	return cred.Token
}

func addMonitor(t testing.TB, h *Hub, name string) string {
	t.Helper()
	var cred schema.Credential
	body := mustDo(t, h, http.MethodPost, "/v1/credentials", []byte(`{"name":"`+name+`","role":"monitor"}`), http.StatusCreated)
	if err := json.Unmarshal(body, &cred); err != nil || cred.Token == "" {
		t.Fatalf("create credential: %v %s", err, body)
	}
	return cred.Token
}

func getDevice(t testing.TB, h *Hub, name string) schema.Device {
	t.Helper()
	var d schema.Device
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/devices/"+name, nil, http.StatusOK), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func getDeployment(t testing.TB, h *Hub, name string) schema.Deployment {
	t.Helper()
	var d schema.Deployment
	if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/deployments/"+name, nil, http.StatusOK), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// metric reads one sample of /metrics: series is the metric name with its
// labels as Prometheus prints them (`fleet_mqtt_malformed_payloads_total{topic_kind="status"}`).
func metric(t testing.TB, h *Hub, series string) float64 {
	t.Helper()
	body := mustDo(t, h, http.MethodGet, "/metrics", nil, http.StatusOK)
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return v
		}
	}
	return 0
}

// statusPayload is a DeviceStatus an agent could send.
func statusPayload(device string, gen int64, store string, pods ...schema.PodStatus) []byte {
	if pods == nil {
		pods = []schema.PodStatus{}
	}
	b, _ := json.Marshal(schema.DeviceStatus{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
		Device:   device, ObservedGeneration: gen, Store: store, Time: time.Now().UTC(),
		Agent: schema.AgentInfo{Version: "test", OS: "linux", Arch: "arm64"},
		Pods:  pods,
	})
	return b
}

// runningPods reports every pod of a desired state ready at its hash.
func runningPods(ds schema.DesiredState) []schema.PodStatus {
	out := []schema.PodStatus{}
	for _, p := range ds.Pods {
		out = append(out, schema.PodStatus{Name: p.Name, Hash: p.Hash, Phase: schema.PhaseRunning, Ready: true, Containers: []schema.ContainerStatus{}})
	}
	return out
}
