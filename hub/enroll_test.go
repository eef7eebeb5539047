package hub

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func createBootstrapToken(t *testing.T, h *testHub, body string) schema.BootstrapToken {
	t.Helper()
	code, b := h.do(t, h.token, "POST", "/v1/bootstrap-tokens", body)
	var bt schema.BootstrapToken
	if err := json.Unmarshal(b, &bt); err != nil || code != 201 {
		t.Fatalf("create bootstrap token: %d %s", code, b)
	}
	return bt
}

// bootstrapClient is a raw bootstrap MQTT client with one request ID.
type bootstrapClient struct {
	t       *testing.T
	c       paho.Client
	id      string
	answers chan []byte
	lost    chan error
}

func dialBootstrap(t *testing.T, url, token, requestID string) *bootstrapClient {
	t.Helper()
	id, err := schema.ParseBootstrapToken(token)
	if err != nil {
		t.Fatal(err)
	}
	bc := &bootstrapClient{t: t, id: requestID, answers: make(chan []byte, 16), lost: make(chan error, 1)}
	bc.c = paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(requestID).
		SetUsername(schema.BootstrapUsername(id)).SetPassword(token).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).
		SetConnectionLostHandler(func(_ paho.Client, err error) { bc.lost <- err }))
	if tok := bc.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect as a bootstrap client: %v", tok.Error())
	}
	t.Cleanup(func() { bc.c.Disconnect(0) })
	topic := schema.Topics{}.Enroll(requestID, schema.TopicEnrollResponse)
	tok := bc.c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) { bc.answers <- append([]byte(nil), m.Payload()...) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil || tok.(*paho.SubscribeToken).Result()[topic] != 1 {
		t.Fatalf("subscribe to the answer: %v", tok.Error())
	}
	return bc
}

// send publishes a request payload and returns the hub's answer.
func (bc *bootstrapClient) send(payload string) schema.EnrollResponse {
	bc.t.Helper()
	tok := bc.c.Publish(schema.Topics{}.Enroll(bc.id, schema.TopicEnrollRequest), 1, false, payload)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		bc.t.Fatalf("publish request: %v", tok.Error())
	}
	select {
	case b := <-bc.answers:
		var resp schema.EnrollResponse
		if err := json.Unmarshal(b, &resp); err != nil || resp.Kind != schema.KindEnrollResponse {
			bc.t.Fatalf("answer %s: %v", b, err)
		}
		return resp
	case <-time.After(10 * time.Second):
		bc.t.Fatal("no answer from the hub")
		return schema.EnrollResponse{}
	}
}

func requestJSON(token, device string) string {
	b, _ := json.Marshal(schema.EnrollRequest{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEnrollRequest},
		Token:    token, Secret: strings.Repeat("s", 43), Device: device,
	})
	return string(b)
}

// withPublicKey adds publicKey to a request's JSON.
func withPublicKey(request, key string) string {
	var r schema.EnrollRequest
	if err := json.Unmarshal([]byte(request), &r); err != nil {
		panic(err)
	}
	r.PublicKey = key
	b, _ := json.Marshal(r)
	return string(b)
}

func TestHubEnroll(t *testing.T) {
	h := startHub(t, Options{})
	bt := createBootstrapToken(t, h, `{"labels":{"site":"north"},"uses":2}`)

	id, err := enroll.Enroll(t.Context(), enroll.Options{
		Broker: h.Info().MQTTURL, BootstrapToken: bt.Token, Device: "pi-1", StateDir: t.TempDir(), Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, b := h.do(t, h.token, "GET", "/v1/devices/pi-1", "")
	var dev schema.Device
	if err := json.Unmarshal(b, &dev); err != nil || dev.Metadata.Labels["site"] != "north" || dev.Metadata.Annotations[store.AnnotationBootstrapToken] != bt.ID {
		t.Fatalf("enrolled device: %s %v", b, err)
	}
	if !h.Store().VerifyToken("pi-1", id.Token) {
		t.Fatal("the enrolled device's token does not verify")
	}

	// Refusals, each with its reason, over one raw bootstrap connection.
	bc := dialBootstrap(t, h.Info().MQTTURL, bt.Token, "req_raw-0123456789abc")
	other := createBootstrapToken(t, h, `{}`)
	tests := []struct {
		name, payload, reason string
	}{
		{"not JSON", "{{", schema.EnrollInvalid},
		{"bad device name", requestJSON(bt.Token, "Pi_2"), schema.EnrollInvalid},
		{"no secret", `{"token":"` + bt.Token + `","device":"pi-2"}`, schema.EnrollInvalid},
		{"unknown token in the request", requestJSON("zzzzzz."+strings.Repeat("0", 32), "pi-2"), schema.EnrollUnauthorized},
		{"the hub's own username", requestJSON(bt.Token, DefaultBrokerUsername), schema.EnrollNameTaken},
		{"an existing device", requestJSON(bt.Token, "pi-1"), schema.EnrollNameTaken},
		{"too large", `{"device":"` + strings.Repeat("x", schema.MaxEnrollPayload) + `"}`, schema.EnrollInvalid},
		{"malformed public key", withPublicKey(requestJSON(bt.Token, "pi-2"), "not-a-key"), schema.EnrollInvalid},
	}
	for _, tt := range tests {
		if resp := bc.send(tt.payload); resp.Reason != tt.reason || resp.Token != "" || resp.Message == "" {
			t.Errorf("%s: answer %+v, want reason %s", tt.name, resp, tt.reason)
		}
	}
	// The request's token decides, not the connection's: another valid
	// token in the payload enrolls with that token's labels.
	// It may carry the device's public key, which the hub keeps.
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	if resp := bc.send(withPublicKey(requestJSON(other.Token, "pi-3"), key)); resp.Token == "" {
		t.Errorf("enroll with another valid token: %+v", resp)
	}
	if err := h.Store().View(t.Context(), func(tx *store.Txn) error {
		v, err := tx.Get(store.DeviceKeyKey("pi-3"))
		if err != nil || string(v) != key {
			t.Errorf("kept key %q: %v", v, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The last use, then used up.
	if resp := (dialBootstrap(t, h.Info().MQTTURL, bt.Token, "req_raw-1111111111abc")).send(requestJSON(bt.Token, "pi-4")); resp.Token == "" {
		t.Fatalf("second use: %+v", resp)
	}
	resp := dialBootstrap(t, h.Info().MQTTURL, bt.Token, "req_raw-2222222222abc").send(requestJSON(bt.Token, "pi-5"))
	if resp.Reason != schema.EnrollUsedUp || !strings.Contains(resp.Message, "used up") {
		t.Errorf("third use of a 2-use token: %+v", resp)
	}

	// An external Mosquitto gets the bootstrap accounts and the
	// enrollment patterns.
	if code, b := h.do(t, h.token, "GET", "/v1/mosquitto/passwd", ""); code != 200 || !strings.Contains(string(b), "\nbootstrap."+bt.ID+":$7$101$") {
		t.Errorf("passwd: %d %s", code, b)
	}
	if code, b := h.do(t, h.token, "GET", "/v1/mosquitto/acl", ""); code != 200 ||
		!strings.Contains(string(b), "pattern write fleet/v1/enroll/%c/request\npattern read fleet/v1/enroll/%c/response\n") {
		t.Errorf("acl: %d %s", code, b)
	}

	// Deleting a bootstrap token ends its sessions.
	if code, b := h.do(t, h.token, "DELETE", "/v1/bootstrap-tokens/"+bt.ID, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	select {
	case <-bc.lost:
	case <-time.After(10 * time.Second):
		t.Error("a deleted bootstrap token's session is still connected")
	}

	// No token ever reaches the logs.
	logs := h.logs.String()
	for _, secret := range []string{bt.Token, other.Token, id.Token, strings.Split(bt.Token, ".")[1]} {
		if strings.Contains(logs, secret) {
			t.Errorf("a token was logged")
		}
	}
	if !strings.Contains(logs, fmt.Sprintf("bootstrap_token=%s", bt.ID)) {
		t.Errorf("enrollments are not logged with the bootstrap token's ID")
	}
}
