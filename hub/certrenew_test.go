package hub

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

// TestHubRenewsClientCertificatesOverMQTT: a device that publishes a CSR
// for itself on its csr topic gets a client certificate of the hub's CA
// on its certificate topic; a CSR naming another device, garbage, and a
// second request within a minute are refused (and logged), and no other
// device may read the answer.
func TestHubRenewsClientCertificatesOverMQTT(t *testing.T) {
	h := startHub(t, Options{HTTPSAddr: "127.0.0.1:0", MQTTTLSAddr: "127.0.0.1:0", MQTTClientCerts: "optional"})
	tokens := map[string]string{}
	for _, name := range []string{"pi-1", "pi-2"} {
		if code, b := h.do(t, h.token, "POST", "/v1/apply", "apiVersion: fleet/v1\nkind: Device\nmetadata:\n  name: "+name+"\n"); code != 200 {
			t.Fatalf("apply: %d %s", code, b)
		}
		_, b := h.do(t, h.token, "POST", "/v1/devices/"+name+"/token", "")
		var cred schema.DeviceCredentials
		if err := json.Unmarshal(b, &cred); err != nil {
			t.Fatal(err)
		}
		tokens[name] = cred.Token
	}
	topics := schema.Topics{}
	dial := func(name string) (paho.Client, chan []byte) {
		got := make(chan []byte, 4)
		c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + h.Info().MQTTAddr).
			SetClientID(fmt.Sprintf("%s-%016x", name, time.Now().UnixNano())).SetUsername(name).SetPassword(tokens[name]).
			SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", name, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(0) })
		return c, got
	}
	c1, got1 := dial("pi-1")
	tok := c1.Subscribe(topics.Device("pi-1", schema.TopicCertificate), 1, func(_ paho.Client, m paho.Message) { got1 <- m.Payload() })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	c2, _ := dial("pi-2")
	sub := c2.Subscribe(topics.Device("pi-1", schema.TopicCertificate), 1, nil)
	if !sub.WaitTimeout(10*time.Second) || sub.(*paho.SubscribeToken).Result()[topics.Device("pi-1", schema.TopicCertificate)] < 0x80 {
		t.Error("pi-2 may read pi-1's certificate topic")
	}

	publish := func(c paho.Client, device string, payload []byte) {
		t.Helper()
		if tok := c.Publish(topics.Device(device, schema.TopicCSR), 0, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	request := func(device string) []byte {
		csr, err := enroll.ClientCSR(t.TempDir(), device)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(schema.DeviceCertificateRequest{CSR: string(csr)})
		return b
	}
	// Refused: garbage, and a CSR naming another device.
	publish(c1, "pi-1", []byte("{not json"))
	awaitLog(t, h, "client certificate request refused")
	before := strings.Count(h.logs.String(), "client certificate request refused")
	publish(c1, "pi-1", request("pi-2"))
	ctxDeadline := time.Now().Add(10 * time.Second)
	for strings.Count(h.logs.String(), "client certificate request refused") == before {
		if time.Now().After(ctxDeadline) {
			t.Fatal("a CSR naming pi-2 sent by pi-1 was not refused")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	if len(got1) != 0 {
		t.Fatal("a refused request got an answer")
	}

	// Its own CSR: a certificate of the hub's CA for pi-1.
	publish(c1, "pi-1", request("pi-1"))
	var answer schema.DeviceCertificate
	select {
	case b := <-got1:
		if err := json.Unmarshal(b, &answer); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no certificate for pi-1's own CSR")
	}
	cert := parseCertPEM(t, answer.Certificate)
	ca := parseCertPEM(t, string(h.Info().CA))
	if answer.Device != "pi-1" || cert.Subject.CommonName != "pi-1" || cert.CheckSignatureFrom(ca) != nil || time.Until(cert.NotAfter) < 300*24*time.Hour {
		t.Errorf("answer for %s: CN %q, until %s", answer.Device, cert.Subject.CommonName, cert.NotAfter)
	}
	// A second one within the minute is not signed.
	publish(c1, "pi-1", request("pi-1"))
	awaitLog(t, h, "client certificate request ignored: one was signed less than a minute ago")
}
