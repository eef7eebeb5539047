package test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/mosquittotest"
	"github.com/fleetmq/fleet/schema"
)

// Abuse resistance (issue 29, item 5), against a real fleet-hub process.

// rawConnectV5 makes one MQTT 5 connection attempt and returns the
// CONNACK reason code: 0x86 (bad username or password) for a credential
// that was checked, 0x97 (quota exceeded) for an attempt refused unchecked.
func rawConnectV5(addr, clientID, username, password string) (byte, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, err
	}
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: clientID,
			UsernameFlag: true, Username: []byte(username), PasswordFlag: true, Password: []byte(password),
		},
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		return 0, err
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	var fh packets.FixedHeader
	b, err := r.ReadByte()
	if err != nil {
		return 0, fmt.Errorf("read CONNACK: %w", err)
	}
	if err := fh.Decode(b); err != nil || fh.Type != packets.Connack {
		return 0, fmt.Errorf("first packet %+v (%v), want CONNACK", fh, err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil || n < 2 {
		return 0, fmt.Errorf("CONNACK length %d: %v", n, err)
	}
	body := make([]byte, n)
	if _, err := r.Read(body); err != nil {
		return 0, fmt.Errorf("read CONNACK: %w", err)
	}
	return body[1], nil
}

// flood runs n attempts on workers goroutines, attempt i starting no
// earlier than i×pace after the first (load generation, not
// synchronisation), and counts their results.
func flood(n, workers int, pace time.Duration, attempt func(i int) string) (map[string]int, time.Duration) {
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		next   atomic.Int64
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if d := time.Until(start.Add(time.Duration(i) * pace)); d > 0 {
					time.Sleep(d)
				}
				r := attempt(i)
				mu.Lock()
				counts[r]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return counts, time.Since(start)
}

// TestE2EAbuseAuthThrottle: 1,000 wrong-password MQTT connects and 1,000
// wrong-token HTTP requests from one address are throttled after a burst,
// while a real device on the same address reconnects in the middle of the
// attack, receives its desired state and reports its status, and the
// admin keeps using the API.
func TestE2EAbuseAuthThrottle(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	tok := addDevice(t, h, "dev-real", map[string]string{"site": "lab"})
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))

	// The device has been online before the attack, as a fleet's are.
	dev := mustDialMQTT(t, h.MQTTURL, "dev-real", tok, dialOpts{})
	dev.subscribe(topics.Device("dev-real", schema.TopicDesired))
	dev.awaitDesired("dev-real", func(ds schema.DesiredState) bool { return len(ds.Pods) == 1 })
	dev.c.Disconnect(0)

	// MQTT: the attack, 250 attempts a second for 4 s, with the device
	// reconnecting half-way through.
	const n = 1000
	halfway := make(chan struct{})
	devDone := make(chan error, 1)
	go func() {
		<-halfway
		c, err := dialMQTT(t, h.MQTTURL, "dev-real", tok, dialOpts{})
		if err == nil {
			c.c.Disconnect(0)
		}
		devDone <- err
	}()
	var once sync.Once
	counts, took := flood(n, 16, 4*time.Millisecond, func(i int) string {
		if i == n/2 {
			once.Do(func() { close(halfway) })
		}
		code, err := rawConnectV5(h.MQTTAddr, fmt.Sprintf("attacker-%d", i), "dev-real", fmt.Sprintf("guess-%d", i))
		switch {
		case err != nil:
			return "error: " + err.Error()
		case code == packets.ErrBadUsernameOrPassword.Code:
			return "checked"
		case code == packets.ErrQuotaExceeded.Code:
			return "throttled"
		default:
			return fmt.Sprintf("CONNACK %#x", code)
		}
	})
	if err := <-devDone; err != nil {
		t.Fatalf("the real device could not reconnect during the attack: %v", err)
	}
	t.Logf("MQTT: %d wrong passwords in %v (%.0f/s): %d checked (%.2f/s; after the burst of 10: %.2f/s), %d throttled; other: %v",
		n, took.Round(time.Millisecond), n/took.Seconds(), counts["checked"], float64(counts["checked"])/took.Seconds(),
		float64(counts["checked"]-10)/took.Seconds(), counts["throttled"], counts)
	// A burst of 10, then 1 a second; attempts checked side by side may
	// overdraw the burst by the number of workers (a debt paid back
	// later).
	if maxChecked := 10 + 16 + int(took.Seconds()) + 1; counts["checked"] > maxChecked || counts["throttled"] < n-maxChecked {
		t.Errorf("MQTT: %v; want at most %d checked, the rest throttled", counts, maxChecked)
	}
	if f, th := metric(t, h, `fleet_auth_failures_total{listener="mqtt"}`), metric(t, h, `fleet_auth_throttled_total{listener="mqtt"}`); int(f) != counts["checked"] || int(th) != counts["throttled"] {
		t.Errorf("metrics: %v failures, %v throttled; the attacker saw %v", f, th, counts)
	}

	// The device, online again during the attack, gets its desired state
	// and its status reaches the hub.
	dev = mustDialMQTT(t, h.MQTTURL, "dev-real", tok, dialOpts{})
	dev.subscribe(topics.Device("dev-real", schema.TopicDesired))
	ds := dev.awaitDesired("dev-real", func(ds schema.DesiredState) bool { return len(ds.Pods) == 1 })
	dev.mustPublish(topics.Device("dev-real", schema.TopicOnline), true, []byte(schema.Online))
	dev.mustPublish(topics.Device("dev-real", schema.TopicStatus), true, statusPayload("dev-real", ds.Generation, ds.Store, runningPods(ds)...))
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h, "dev-real")
		return d.Status != nil && d.Status.Converged && d.Status.Online
	}, "dev-real converged during the attack")

	// HTTP: the same from the same address; the admin's requests in
	// between are served.
	client := &http.Client{Timeout: 30 * time.Second}
	adminOK := atomic.Int64{}
	counts, took = flood(n, 16, 0, func(i int) string {
		token := fmt.Sprintf("guess-%04d-%s", i, strings.Repeat("x", 32))
		if i%100 == 50 {
			token = h.Token
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.URL+"/v1/devices", nil)
		if err != nil {
			return "error: " + err.Error()
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return "error: " + err.Error()
		}
		resp.Body.Close()
		switch {
		case token == h.Token && resp.StatusCode == http.StatusOK:
			adminOK.Add(1)
			return "admin ok"
		case resp.StatusCode == http.StatusUnauthorized:
			return "checked"
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
			return "throttled"
		default:
			return fmt.Sprintf("HTTP %d", resp.StatusCode)
		}
	})
	t.Logf("HTTP: %d requests in %v (%.0f/s): %d wrong tokens checked (%.2f/s), %d throttled, admin served %d/10; other: %v",
		n, took.Round(time.Millisecond), n/took.Seconds(), counts["checked"], float64(counts["checked"])/took.Seconds(), counts["throttled"], adminOK.Load(), counts)
	if maxChecked := 10 + 16 + int(took.Seconds()) + 1; counts["checked"] > maxChecked || counts["throttled"] < n-10-maxChecked {
		t.Errorf("HTTP: %v; want at most %d checked, the rest throttled", counts, maxChecked)
	}
	if adminOK.Load() != 10 {
		t.Errorf("the admin token was served %d times of 10 during the attack", adminOK.Load())
	}
	if f := metric(t, h, `fleet_auth_failures_total{listener="http"}`); int(f) != counts["checked"] {
		t.Errorf("fleet_auth_failures_total{listener=\"http\"} %v, the attacker saw %d checked", f, counts["checked"])
	}
	if th := metric(t, h, `fleet_auth_throttled_total{listener="http"}`); int(th) != counts["throttled"] {
		t.Errorf("fleet_auth_throttled_total{listener=\"http\"} %v, the attacker saw %d throttled", th, counts["throttled"])
	}
	if logs := h.Logs(); strings.Contains(logs, "guess-0") || strings.Contains(logs, tok) {
		t.Error("a password or token was logged")
	}
}

// TestE2EAbuseFloodCutOff: a device that floods its events topic, and one
// that sends an oversize packet, are cut off; another device keeps
// working meanwhile and after.
func TestE2EAbuseFloodCutOff(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	labels := map[string]string{"site": "lab"}
	tokFlood := addDevice(t, h, "dev-flood", labels)
	tokBig := addDevice(t, h, "dev-big", labels)
	tokGood := addDevice(t, h, "dev-good", labels)
	applyYAML(t, h, webYAML("web", "nginx:1", labels))

	good := mustDialMQTT(t, h.MQTTURL, "dev-good", tokGood, dialOpts{})
	good.subscribe(topics.Device("dev-good", schema.TopicDesired))
	ds := good.awaitDesired("dev-good", func(ds schema.DesiredState) bool { return len(ds.Pods) == 1 })
	good.mustPublish(topics.Device("dev-good", schema.TopicOnline), true, []byte(schema.Online))

	flooder := mustDialMQTT(t, h.MQTTURL, "dev-flood", tokFlood, dialOpts{})
	start := time.Now()
	sent := 0
	for ; sent < 5000 && flooder.c.IsConnectionOpen(); sent++ {
		ev := fmt.Appendf(nil, `{"apiVersion":"fleet/v1","kind":"Event","device":"dev-flood","type":"Normal","reason":"Flood","message":"%d"}`, sent)
		flooder.c.Publish(topics.Device("dev-flood", schema.TopicEvents), 0, false, ev)
		// The device's status meanwhile: it is the flood that cuts it off.
		if sent == 10 {
			good.mustPublish(topics.Device("dev-good", schema.TopicStatus), true, statusPayload("dev-good", ds.Generation, ds.Store, runningPods(ds)...))
		}
	}
	flooder.awaitLost(mqttWait)
	t.Logf("flooding device cut off after %d publishes in %v", sent, time.Since(start).Round(time.Millisecond))
	awaitf(t, mqttWait, func() bool {
		return metric(t, h, `fleet_mqtt_clients_cut_off_total{reason="publish_rate"}`) >= 1
	}, "a publish_rate cut-off counted")

	big := mustDialMQTT(t, h.MQTTURL, "dev-big", tokBig, dialOpts{})
	big.c.Publish(topics.Device("dev-big", schema.TopicStatus), 0, false, bytes.Repeat([]byte("x"), broker.DefaultMaxPacketSize+1))
	big.awaitLost(mqttWait)
	awaitf(t, mqttWait, func() bool {
		return metric(t, h, `fleet_mqtt_clients_cut_off_total{reason="packet_too_large"}`) == 1
	}, "a packet_too_large cut-off counted")

	// The good device was never disconnected, converged, and its next
	// report arrives too.
	if !good.c.IsConnectionOpen() {
		t.Fatal("the good device was disconnected")
	}
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h, "dev-good")
		return d.Status != nil && d.Status.Converged && d.Status.Online
	}, "dev-good converged while another device flooded")
	applyYAML(t, h, webYAML("web", "nginx:2", labels))
	ds = good.awaitDesired("dev-good", func(d schema.DesiredState) bool { return d.Generation > ds.Generation })
	good.mustPublish(topics.Device("dev-good", schema.TopicStatus), true, statusPayload("dev-good", ds.Generation, ds.Store, runningPods(ds)...))
	awaitf(t, mqttWait, func() bool {
		d := getDevice(t, h, "dev-good")
		return d.Status != nil && d.Status.Converged && d.Status.ObservedGeneration == ds.Generation
	}, "dev-good converged on the update after the flood")
	if n := metric(t, h, `fleet_mqtt_clients_cut_off_total{reason="publish_rate"}`); n != 1 {
		t.Errorf("%v publish_rate cut-offs, want 1 (only the flooder)", n)
	}
}

// TestE2EAbuseMosquittoSync: with an external Mosquitto and
// --mosquitto-config-dir/--mosquitto-pid-file, every token change reaches
// Mosquitto without a manual step: a new device's token works, a rotated
// one is refused (its session dropped) and the new one accepted, a
// deleted device is refused; the same for a monitor credential.
func TestE2EAbuseMosquittoSync(t *testing.T) {
	t.Parallel()
	hubAcct := broker.MosquittoAccount{Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: "hub-password-for-the-abuse-test-0123"}
	m := mosquittotest.Start(t, mosquittotest.Config{Accounts: []broker.MosquittoAccount{hubAcct}})
	h := StartHub(t, HubOptions{Args: []string{
		"--broker", m.URL, "--broker-password-file", writeSecret(t, hubAcct.Password),
		"--mosquitto-config-dir", m.Dir, "--mosquitto-pid-file", m.WritePIDFile(t),
	}})
	accepted := func(user, pass string) bool {
		c, err := dialMQTT(t, m.URL, user, pass, dialOpts{})
		if err != nil {
			return false
		}
		c.c.Disconnect(0)
		return true
	}

	start := time.Now()
	tok := addDevice(t, h, "dev-a", map[string]string{"site": "lab"})
	awaitf(t, mqttWait, func() bool { return accepted("dev-a", tok) }, "dev-a's token accepted by Mosquitto")
	t.Logf("a new device's token works on Mosquitto %v after fleet device add", time.Since(start).Round(time.Millisecond))

	// Connected with the old token while it is rotated.
	old := mustDialMQTT(t, m.URL, "dev-a", tok, dialOpts{})
	start = time.Now()
	tok2 := issueToken(t, h, "dev-a")
	awaitf(t, mqttWait, func() bool { return accepted("dev-a", tok2) }, "the rotated token accepted")
	t.Logf("a rotated token works on Mosquitto %v after the rotation", time.Since(start).Round(time.Millisecond))
	if accepted("dev-a", tok) {
		t.Error("the old token is still accepted after the rotation")
	}
	old.awaitLost(mqttWait)

	mustDo(t, h, http.MethodDelete, "/v1/devices/dev-a", nil, http.StatusOK)
	awaitf(t, mqttWait, func() bool { return !accepted("dev-a", tok2) }, "a deleted device's token refused")

	mtok := addMonitor(t, h, "grafana")
	awaitf(t, mqttWait, func() bool { return accepted("grafana", mtok) }, "the monitor's token accepted")
	mustDo(t, h, http.MethodDelete, "/v1/credentials/grafana", nil, http.StatusOK)
	awaitf(t, mqttWait, func() bool { return !accepted("grafana", mtok) }, "a deleted monitor's token refused")

	// The hub itself stayed connected through the reloads: a new
	// device's desired state still reaches Mosquitto.
	tokB := addDevice(t, h, "dev-b", map[string]string{"site": "lab"})
	applyYAML(t, h, webYAML("web", "nginx:1", map[string]string{"site": "lab"}))
	var b *mqttClient
	awaitf(t, mqttWait, func() bool {
		var err error
		b, err = dialMQTT(t, m.URL, "dev-b", tokB, dialOpts{})
		return err == nil
	}, "dev-b accepted")
	b.subscribe(topics.Device("dev-b", schema.TopicDesired))
	b.awaitDesired("dev-b", func(ds schema.DesiredState) bool { return len(ds.Pods) == 1 })
	if logs := h.Logs(); !strings.Contains(logs, "mosquitto files rewritten and Mosquitto reloaded") {
		t.Error("the hub did not log its reloads")
	}
}
