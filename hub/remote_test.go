package hub

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/schema"
)

// TestHubRemoteWiring: through a whole hub, a device's crash event
// reaches /crashreports, a follow stream relays the device's answer, and
// the hub's shutdown ends the open stream (with the Fleet-Error trailer)
// instead of waiting for it.
func TestHubRemoteWiring(t *testing.T) {
	h := startHub(t, Options{ShutdownTimeout: 20 * time.Second})
	if code, b := h.do(t, h.token, "POST", "/v1/apply", "apiVersion: fleet/v1\nkind: Device\nmetadata: {name: pi}\n"); code != 200 {
		t.Fatalf("apply: %d %s", code, b)
	}
	_, b := h.do(t, h.token, "POST", "/v1/devices/pi/token", "")
	var cred schema.DeviceCredentials
	if err := json.Unmarshal(b, &cred); err != nil {
		t.Fatal(err)
	}
	topics := schema.Topics{}
	reqs := make(chan *schema.Request, 64)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.Info().MQTTURL).SetClientID("pi").SetUsername("pi").SetPassword(cred.Token).
		SetAutoReconnect(false).SetOrderMatters(true).SetConnectTimeout(10 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	tok := c.Subscribe(topics.Device("pi", schema.TopicRequests), 1, func(_ paho.Client, m paho.Message) {
		if r, err := schema.DecodeRequest(m.Payload()); err == nil {
			reqs <- r
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	publish := func(kind string, payload []byte) {
		t.Helper()
		if tok := c.Publish(topics.Device("pi", kind), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", kind, tok.Error())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		publish(schema.TopicOnline, []byte(schema.Online))
		publish(schema.TopicEvents, []byte(`{"id":"e1","device":"pi","type":"Warning","reason":"BackOff","pod":"web","container":"app","exitCode":2,"logTail":"boom\n","time":"2024-01-01T00:00:00Z"}`))
		if code, b := h.do(t, h.token, "GET", "/v1/devices/pi/crashreports", ""); code == 200 && strings.Contains(string(b), `"logTail":"boom\n"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the crash report never reached /crashreports")
		}
		time.Sleep(50 * time.Millisecond)
	}

	req, err := http.NewRequestWithContext(context.Background(), "GET", h.Info().URL+"/v1/devices/pi/pods/web/log?follow=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	respc := make(chan *http.Response, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			errc <- err
			return
		}
		respc <- resp
	}()
	var lr *schema.Request
	select {
	case lr = <-reqs:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no logs request reached the device")
	}
	resp, _ := json.Marshal(schema.Response{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindResponse},
		ID:       lr.ID, Device: "pi", Seq: 1, Stream: schema.StreamLog, Data: []byte("hello\n"),
	})
	publish(schema.TopicResponses, resp)
	var r *http.Response
	select {
	case r = <-respc:
	case err := <-errc:
		t.Fatal(err)
	}
	defer r.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "hello\n" || r.Header.Get(schema.HeaderLogSource) != schema.LogSourceDevice {
		t.Fatalf("stream: %q %v %v", buf, err, r.Header)
	}
	start := time.Now()
	h.stopForTest(t)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the hub took %v to stop with a stream open", d)
	}
	if _, err := io.ReadAll(r.Body); err != nil {
		t.Fatalf("stream end: %v", err)
	}
	if e := r.Trailer.Get(schema.TrailerError); !strings.Contains(e, "shutting down") {
		t.Errorf("Fleet-Error trailer %q", e)
	}
}
