package test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// TestMQTTRemoteTopicsIsolation, on the embedded broker and on external
// Mosquitto, with the stock mosquitto_sub and mosquitto_pub and a device's
// own token: dev-a reads its own requests but neither dev-b's requests nor
// anyone's responses, and cannot answer for dev-b. dev-a's forged answer
// to a request the hub sent dev-b (its ID read by the simulated dev-b)
// never reaches the hub on dev-b's topic, and is refused by the hub on
// dev-a's own; the hub answers with dev-b's real report.
func TestMQTTRemoteTopicsIsolation(t *testing.T) {
	for _, kind := range []string{BrokerEmbedded, BrokerMosquitto} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			remoteIsolation(t, kind)
		})
	}
}

func remoteIsolation(t *testing.T, kind string) {
	sub := sysdeps.Require(t, "mosquitto_sub")
	pub := sysdeps.Require(t, "mosquitto_pub")
	var h *Hub
	var m *mosquittotest.Mosquitto
	var brokerURL string
	if kind == BrokerEmbedded {
		h = StartHub(t, HubOptions{})
		brokerURL = h.MQTTURL
	} else {
		hubAcct := broker.MosquittoAccount{Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: randomHex(t, 20)}
		m = mosquittotest.Start(t, mosquittotest.Config{Accounts: []broker.MosquittoAccount{hubAcct}})
		h = StartHub(t, HubOptions{Args: []string{"--broker", m.URL, "--broker-password-file", writeSecret(t, hubAcct.Password)}})
		brokerURL = m.URL
		tokA := addDevice(t, h, "dev-a", nil)
		tokB := addDevice(t, h, "dev-b", nil)
		m.SetAccounts(t, []broker.MosquittoAccount{hubAcct,
			{Identity: broker.Identity{Name: "dev-a", Role: broker.RoleDevice}, Password: tokA},
			{Identity: broker.Identity{Name: "dev-b", Role: broker.RoleDevice}, Password: tokB},
		})
		remoteIsolationChecks(t, h, brokerURL, sub, pub, tokA, tokB)
		return
	}
	tokA := addDevice(t, h, "dev-a", nil)
	tokB := addDevice(t, h, "dev-b", nil)
	remoteIsolationChecks(t, h, brokerURL, sub, pub, tokA, tokB)
}

func remoteIsolationChecks(t *testing.T, h *Hub, brokerURL, sub, pub, tokA, tokB string) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	mq := func(bin string, args ...string) *exec.Cmd {
		return exec.CommandContext(t.Context(), bin, append([]string{"-h", host, "-p", port, "-V", "mqttv311"}, args...)...)
	}

	// dev-b, simulated: it comes online and records the requests it gets.
	b := mustDialMQTT(t, brokerURL, "dev-b", tokB, dialOpts{})
	b.mustPublish(topics.Device("dev-b", schema.TopicOnline), true, []byte(schema.Online))
	if code := b.subscribe(topics.Device("dev-b", schema.TopicRequests)); code >= 0x80 {
		t.Fatalf("dev-b may not subscribe to its own requests: SUBACK %#x", code)
	}

	// dev-a's mosquitto_sub: another device's requests, everyone's
	// requests and responses, and (to prove it listens) its own requests.
	var seen syncBuffer
	spy := mq(sub, "-u", "dev-a", "-P", tokA, "-i", "dev-a-00000000000000a0", "-v", "-q", "1",
		"-t", topics.Device("dev-b", schema.TopicRequests),
		"-t", topics.Device("dev-b", schema.TopicResponses),
		"-t", topics.DeviceFilter(schema.TopicRequests),
		"-t", topics.DeviceFilter(schema.TopicResponses),
		"-t", topics.Device("dev-a", schema.TopicResponses),
		"-t", topics.Device("dev-a", schema.TopicRequests))
	spy.Stdout, spy.Stderr = &seen, &seen
	if err := spy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = spy.Process.Kill(); _ = spy.Wait() })

	// dev-a comes online; a request from the hub reaches its spy (so the
	// spy listens), and dev-a never answers it.
	if out, err := mq(pub, "-u", "dev-a", "-P", tokA, "-i", "dev-a-00000000000000a1", "-q", "1", "-r",
		"-t", topics.Device("dev-a", schema.TopicOnline), "-m", schema.Online).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub dev-a online: %v: %s", err, out)
	}
	awaitf(t, 30*time.Second, func() bool {
		d := getDevice(t, h, "dev-a")
		e := getDevice(t, h, "dev-b")
		return d.Status != nil && d.Status.Online && e.Status != nil && e.Status.Online
	}, "dev-a and dev-b online")
	go hubRequest(t.Context(), h.URL, h.Token, http.MethodGet, "/v1/devices/dev-a/top", nil) //nolint:errcheck // dev-a never answers
	awaitf(t, 30*time.Second, func() bool { return strings.Contains(seen.String(), topics.Device("dev-a", schema.TopicRequests)) }, "dev-a's own request at its mosquitto_sub; it printed %q", seen.String())

	// The hub asks dev-b for figures; its request ID is all a forger
	// needs, and dev-b (the test) reads it.
	answer := make(chan schema.TopReport, 1)
	go func() {
		code, body, err := hubRequest(t.Context(), h.URL, h.Token, http.MethodGet, "/v1/devices/dev-b/top", nil)
		var rep schema.TopReport
		if err == nil && code == http.StatusOK {
			_ = json.Unmarshal(body, &rep)
		}
		answer <- rep
	}()
	var req schema.Request
	b.await("dev-b's top request", func(msg mqttMsg) bool {
		return msg.Topic == topics.Device("dev-b", schema.TopicRequests) && json.Unmarshal(msg.Payload, &req) == nil && req.Op == schema.OpTop
	})

	forged := func(device string) string {
		b, err := json.Marshal(schema.Response{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindResponse},
			ID:       req.ID, Device: device, Seq: 1, Done: true,
			Top: &schema.TopReport{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "TopReport"}, Device: "dev-b", Time: time.Now().UTC(), Node: schema.NodeMetrics{CPUs: 99}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	refused := func() float64 {
		return metric(t, h, `fleet_remote_responses_dropped_total{reason="device_mismatch"}`) +
			metric(t, h, `fleet_remote_responses_dropped_total{reason="unknown_id"}`)
	}
	dropped := refused()
	// dev-a answers for dev-b on dev-b's topic: the broker refuses it
	// (Mosquitto drops it; the embedded broker ends the session of a
	// QoS 1 publish it refuses, so mosquitto_pub may fail).
	_ = mq(pub, "-u", "dev-a", "-P", tokA, "-i", "dev-a-00000000000000a2", "-q", "1",
		"-t", topics.Device("dev-b", schema.TopicResponses), "-m", forged("dev-b")).Run()
	// ... and on its own topic: it reaches the hub, which refuses it: the
	// request went to dev-b.
	if out, err := mq(pub, "-u", "dev-a", "-P", tokA, "-i", "dev-a-00000000000000a3", "-q", "1",
		"-t", topics.Device("dev-a", schema.TopicResponses), "-m", forged("dev-a")).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub to dev-a's own responses topic: %v: %s", err, out)
	}
	awaitf(t, 30*time.Second, func() bool {
		return refused() > dropped
	}, "the hub refusing dev-a's answer to dev-b's request")

	// dev-b's real answer wins.
	real, err := json.Marshal(schema.Response{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindResponse},
		ID:       req.ID, Device: "dev-b", Seq: 1, Done: true,
		Top: &schema.TopReport{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "TopReport"}, Device: "dev-b", Time: time.Now().UTC(), Node: schema.NodeMetrics{CPUs: 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.mustPublish(topics.Device("dev-b", schema.TopicResponses), false, real)
	select {
	case rep := <-answer:
		if rep.Node.CPUs != 4 || rep.Stale {
			t.Errorf("GET /v1/devices/dev-b/top = %+v, want dev-b's own report (4 CPUs)", rep)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("GET /v1/devices/dev-b/top did not answer")
	}

	// One more request to dev-a, after everything of dev-b's: when the
	// spy has it, anything routed to it before has arrived too (one
	// subscriber's messages keep the broker's order).
	go hubRequest(t.Context(), h.URL, h.Token, http.MethodGet, "/v1/devices/dev-a/top", nil) //nolint:errcheck // dev-a never answers
	awaitf(t, 30*time.Second, func() bool {
		return strings.Count(seen.String(), topics.Device("dev-a", schema.TopicRequests)+" ") >= 2
	}, "dev-a's second request at its mosquitto_sub; it printed %q", seen.String())
	for _, line := range strings.Split(strings.TrimSpace(seen.String()), "\n") {
		if strings.HasPrefix(line, topics.Device("dev-b", "")) || strings.Contains(line, "/responses ") {
			t.Errorf("dev-a's mosquitto_sub received %q", line)
		}
	}
}
