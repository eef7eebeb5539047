package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EThreatModelClientCertOfAnotherDevice: on a hub with
// --mqtt-client-certs=required, a stolen device token is useless over TLS
// with another device's certificate (its key and all): dev-a's token with
// dev-b's certificate is refused, and so is dev-a's token alone; dev-b's
// token with its own certificate connects (the control: the certificate
// is a good one).
func TestE2EThreatModelClientCertOfAnotherDevice(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{Args: []string{"--mqtt-client-certs=required"}})
	tokA := addDevice(t, h, "dev-a", nil)
	tokB := addDevice(t, h, "dev-b", nil)
	certB := deviceClientCert(t, h, "dev-b")

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mustRead(t, h.CAFile)) {
		t.Fatal("no CA in " + h.CAFile)
	}
	connect := func(device, token string, certs []tls.Certificate) error {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(h.MQTTTLSURL).SetClientID(device).
			SetUsername(device).SetPassword(token).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).
			SetTLSConfig(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "localhost", MinVersion: tls.VersionTLS12}))
		tok := c.Connect()
		if !tok.WaitTimeout(15 * time.Second) {
			return errors.New("connect timed out")
		}
		if tok.Error() == nil {
			c.Disconnect(0)
		}
		return tok.Error()
	}
	if err := connect("dev-a", tokA, []tls.Certificate{certB}); err == nil {
		t.Error("dev-a's token with dev-b's client certificate was accepted over TLS")
	}
	if err := connect("dev-a", tokA, nil); err == nil {
		t.Error("dev-a's token without a client certificate was accepted over TLS")
	}
	if err := connect("dev-b", tokB, []tls.Certificate{certB}); err != nil {
		t.Errorf("dev-b's token with its own certificate: %v", err)
	}
}

// deviceClientCert makes a key and has the hub sign a client certificate
// for device (POST /v1/devices/{name}/certificate, as an admin would for
// a device enrolled without one).
func deviceClientCert(t *testing.T, h *Hub, device string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: device}}, key)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(schema.DeviceCertificateRequest{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))})
	if err != nil {
		t.Fatal(err)
	}
	var dc schema.DeviceCertificate
	if err := json.Unmarshal(mustDo(t, h, http.MethodPost, "/v1/devices/"+device+"/certificate", body, http.StatusOK), &dc); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(dc.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatalf("the hub's certificate for %s: %v", device, err)
	}
	return cert
}

// TestE2EThreatModelOtherDevicesDesiredState: on Mosquitto, a rogue
// publisher with publish rights on the desired topics (the harness's
// injector account) replays another device's genuine, hub-signed desired
// state on a device's topic, retained. The device refuses it (it is
// addressed to the other device), says so in its log, runs none of the
// other device's pods and keeps its own container with the same PID.
func TestE2EThreatModelOtherDevicesDesiredState(t *testing.T) {
	f := StartFleet(t, FleetOptions{Agents: 2, Broker: BrokerMosquitto, DevicePrefix: "odd", Labels: e2eLabels})
	devs := f.Devices()
	victim, other := devs[0], devs[1] // role=sensor, role=display (e2eLabels)
	mine := e2eDep{Name: "e2e-mine", Selector: map[string]string{"role": "sensor"}}
	f.applyDeps(t, mine, e2eDep{Name: "e2e-theirs", Selector: map[string]string{"role": "display"}})
	f.AwaitContainerRunning(t, victim, "e2e-mine", f.PodHash(t, "e2e-mine"))
	// Two more versions of the other device's pod: its desired state's
	// generation is then above the victim's, so only the device check
	// (not the order of generations) stands between the victim and it.
	for _, v := range []string{"2", "3"} {
		f.applyDeps(t, mine, e2eDep{Name: "e2e-theirs", Selector: map[string]string{"role": "display"}, Env: map[string]string{"V": v}})
		f.AwaitContainerRunning(t, other, "e2e-theirs", f.PodHash(t, "e2e-theirs"))
	}
	st := f.AwaitConverged(t, e2eConverge, victim, other)
	if gv, gotOther := st[victim].Status.DesiredGeneration, st[other].Status.DesiredGeneration; gotOther <= gv {
		t.Fatalf("generations: %s %d, %s %d; want the other's higher", victim, gv, other, gotOther)
	}
	pids := f.TaskPIDs(t, victim)
	marks := f.eventMarks()
	a := f.Agent(t, victim)

	user, pass := f.InjectorMQTTAccount()
	rogue := mustDialMQTT(t, f.BrokerURL, user, pass, dialOpts{clientID: user})
	theirs := topics.Device(other, schema.TopicDesired)
	rogue.subscribe(theirs)
	captured := rogue.await("the other device's retained desired state", func(m mqttMsg) bool { return m.Topic == theirs && m.Retained }).Payload
	if !strings.Contains(string(captured), "e2e-theirs") {
		t.Fatalf("%s's desired state has no e2e-theirs pod: %.500s", other, captured)
	}

	mark := a.LogMark()
	const refusal = "refused a desired state addressed to device"
	rogue.mustPublish(topics.Device(victim, schema.TopicDesired), true, captured)
	runsTheirs := func() bool {
		for _, c := range f.Containers(t, victim) {
			if c.Pod == "e2e-theirs" {
				return true
			}
		}
		return false
	}
	awaitf(t, 30*time.Second, func() bool {
		return strings.Contains(a.Logs()[mark:], refusal) || runsTheirs()
	}, "%s neither refused %s's desired state nor ran it", victim, other)
	if runsTheirs() {
		t.Fatalf("%s runs %s's pod e2e-theirs: the replayed desired state of another device was applied", victim, other)
	}
	if !strings.Contains(a.Logs()[mark:], refusal) {
		t.Errorf("%s did not log %q", victim, refusal)
	}
	awaitf(t, 30*time.Second, func() bool {
		d := f.Device(t, victim)
		return d.Status != nil && strings.Contains(d.Status.Message, refusal)
	}, "the hub does not show %s's refusal in its status", victim)
	samePIDs(t, "after another device's desired state", pids, f.TaskPIDs(t, victim))
	if evs := f.eventsSince(victim, marks[victim]); len(evs) > 0 {
		t.Errorf("containerd saw %s", fmtEvents(evs))
	}
}
