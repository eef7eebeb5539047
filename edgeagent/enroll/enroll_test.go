package enroll

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/broker/brokertest"
	"github.com/fleetmq/fleet/edgeagent/backoff"
	"github.com/fleetmq/fleet/schema"
)

const testToken = "abcdef.0123456789abcdefghijklmnopqrstuv"

// testBackoff keeps Run's waits between attempts short.
var testBackoff = backoff.Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}

var topics schema.Topics

// fakeHub is an embedded broker that admits testToken as a bootstrap
// client and answers enrollment requests with answer (the hub's part).
type fakeHub struct {
	b   *broker.Broker
	url string

	mu       sync.Mutex
	requests []seenRequest
	answer   func(n int, req schema.EnrollRequest) (schema.EnrollResponse, bool)
}

type seenRequest struct {
	id  string
	req schema.EnrollRequest
}

func startFakeHub(t *testing.T, answer func(n int, req schema.EnrollRequest) (schema.EnrollResponse, bool)) *fakeHub {
	t.Helper()
	auth := broker.NewStaticAuth()
	auth.Set(broker.Identity{Name: schema.BootstrapUsername("abcdef"), Role: broker.RoleBootstrap}, testToken)
	b := brokertest.Start(t, broker.Options{Addr: "127.0.0.1:0", Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	h := &fakeHub{b: b, url: "tcp://" + b.Addr().String(), answer: answer}
	unsub, err := b.Subscribe(topics.EnrollRequestFilter(), h.handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsub)
	return h
}

func (h *fakeHub) handle(topic string, payload []byte) {
	id, _, err := topics.ParseEnroll(topic)
	if err != nil {
		return
	}
	var req schema.EnrollRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return
	}
	h.mu.Lock()
	h.requests = append(h.requests, seenRequest{id: id, req: req})
	n := len(h.requests)
	h.mu.Unlock()
	resp, ok := h.answer(n, req)
	if !ok {
		// Lose the answer: end the client's connection instead.
		h.b.Kick(schema.BootstrapUsername("abcdef"))
		return
	}
	b, _ := json.Marshal(resp)
	_ = h.b.Publish(topics.Enroll(id, schema.TopicEnrollResponse), b, false)
}

func (h *fakeHub) seen() []seenRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]seenRequest(nil), h.requests...)
}

func grant(_ int, req schema.EnrollRequest) (schema.EnrollResponse, bool) {
	return schema.EnrollResponse{Device: req.Device, Token: "device-token-of-" + req.Device}, true
}

func options(t *testing.T, h *fakeHub, dir string) Options {
	return Options{
		Broker: h.url, BootstrapToken: testToken, Device: "pi-1", StateDir: dir,
		Timeout: 10 * time.Second, Backoff: testBackoff,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEnrollSavesTokenOnce(t *testing.T) {
	h := startFakeHub(t, grant)
	dir := t.TempDir()
	o := options(t, h, dir)

	id, enrolled, err := Ensure(ctxT(t), o)
	if err != nil || !enrolled || id != (Identity{Device: "pi-1", Token: "device-token-of-pi-1"}) {
		t.Fatalf("Ensure = %+v, %v, %v", id, enrolled, err)
	}
	seen := h.seen()
	if len(seen) != 1 || seen[0].req.Token != testToken || seen[0].req.Device != "pi-1" || len(seen[0].req.Secret) < 32 ||
		seen[0].req.Kind != schema.KindEnrollRequest || schema.ValidateRequestID(seen[0].id) != nil {
		t.Fatalf("hub saw %+v", seen)
	}
	fi, err := os.Stat(filepath.Join(dir, TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, RequestFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the request file outlived the enrollment: %v", err)
	}

	// Restarted: the saved token, with no network at all and no
	// bootstrap token.
	o.Broker = "tcp://127.0.0.1:1"
	o.BootstrapToken = ""
	again, enrolled, err := Ensure(ctxT(t), o)
	if err != nil || enrolled || again != id {
		t.Fatalf("Ensure after enrolling = %+v, %v, %v", again, enrolled, err)
	}
	o.Device = ""
	if again, _, err := Ensure(ctxT(t), o); err != nil || again != id {
		t.Fatalf("Ensure without --device = %+v, %v", again, err)
	}
	o.Device = "pi-2"
	if _, _, err := Ensure(ctxT(t), o); err == nil || !strings.Contains(err.Error(), `"pi-1", not "pi-2"`) {
		t.Fatalf("Ensure for another name: %v", err)
	}
	if len(h.seen()) != 1 {
		t.Errorf("the hub saw %d requests, want 1", len(h.seen()))
	}
}

// TestEnrollLostAnswerRetriesSameRequest: an attempt whose answer never
// came is retried with the same request ID and secret.
func TestEnrollLostAnswerRetriesSameRequest(t *testing.T) {
	h := startFakeHub(t, func(n int, req schema.EnrollRequest) (schema.EnrollResponse, bool) {
		if n == 1 {
			return schema.EnrollResponse{}, false
		}
		return grant(n, req)
	})
	dir := t.TempDir()
	id, err := Run(ctxT(t), options(t, h, dir))
	if err != nil || id.Token != "device-token-of-pi-1" {
		t.Fatalf("Run = %+v, %v", id, err)
	}
	seen := h.seen()
	if len(seen) != 2 || seen[0].id != seen[1].id || seen[0].req.Secret != seen[1].req.Secret {
		t.Fatalf("requests %+v: want the same request twice", seen)
	}
}

// TestEnrollRefusals: a refusal ends Run at once with the hub's reason,
// and the next enrollment is a new request; a wrong bootstrap token is
// refused by the broker.
func TestEnrollRefusals(t *testing.T) {
	for _, reason := range []string{schema.EnrollExpired, schema.EnrollUsedUp, schema.EnrollNameTaken, schema.EnrollUnauthorized} {
		t.Run(reason, func(t *testing.T) {
			h := startFakeHub(t, func(_ int, req schema.EnrollRequest) (schema.EnrollResponse, bool) {
				return schema.EnrollResponse{Device: req.Device, Reason: reason, Message: "no"}, true
			})
			dir := t.TempDir()
			_, err := Run(ctxT(t), options(t, h, dir))
			var ref *RefusedError
			if !errors.As(err, &ref) || ref.Reason != reason || ref.Temporary() || !strings.Contains(err.Error(), reason) {
				t.Fatalf("Run = %v, want a %s refusal", err, reason)
			}
			if _, err := os.Stat(filepath.Join(dir, RequestFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("refused request still pending: %v", err)
			}
			if _, err := Stored(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Stored after a refusal: %v", err)
			}
		})
	}

	t.Run("internal error is retried", func(t *testing.T) {
		h := startFakeHub(t, func(n int, req schema.EnrollRequest) (schema.EnrollResponse, bool) {
			if n == 1 {
				return schema.EnrollResponse{Device: req.Device, Reason: schema.EnrollInternalError}, true
			}
			return grant(n, req)
		})
		if _, err := Run(ctxT(t), options(t, h, t.TempDir())); err != nil {
			t.Fatal(err)
		}
		if seen := h.seen(); len(seen) != 2 || seen[0].id != seen[1].id {
			t.Errorf("want the same request retried: %+v", seen)
		}
	})

	t.Run("wrong bootstrap token", func(t *testing.T) {
		h := startFakeHub(t, grant)
		o := options(t, h, t.TempDir())
		o.BootstrapToken = "abcdef." + strings.Repeat("x", 32)
		if _, err := Enroll(ctxT(t), o); !errors.Is(err, ErrBrokerRefused) {
			t.Fatalf("Enroll = %v, want ErrBrokerRefused", err)
		}
		if strings.Contains(errText(Enroll(ctxT(t), o)), o.BootstrapToken) {
			t.Error("the error shows the bootstrap token")
		}
	})
}

func errText(_ Identity, e error) string {
	if e == nil {
		return ""
	}
	return e.Error()
}

func TestEnrollOptions(t *testing.T) {
	dir := t.TempDir()
	for name, o := range map[string]Options{
		"no broker":    {BootstrapToken: testToken, Device: "pi", StateDir: dir},
		"bad token":    {Broker: "tcp://h:1883", BootstrapToken: "secret", Device: "pi", StateDir: dir},
		"bad device":   {Broker: "tcp://h:1883", BootstrapToken: testToken, Device: "Pi_1", StateDir: dir},
		"no state dir": {Broker: "tcp://h:1883", BootstrapToken: testToken, Device: "pi"},
	} {
		_, e := Enroll(t.Context(), o)
		if e == nil {
			t.Errorf("%s: Enroll succeeded", name)
		} else if strings.Contains(e.Error(), "secret") && name == "bad token" {
			t.Errorf("%s: the error shows the token: %v", name, e)
		}
	}
}
