package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// testSigner signs with one key, as hub.Signer does.
type testSigner struct{ key ed25519.PrivateKey }

func (s testSigner) SignDesiredState(canonical []byte) ([]byte, error) {
	return schema.SignDesiredState(canonical, s.key, nil)
}

// TestControllerSignsEveryDesiredState: with a Signer, every desired
// state published (the first pass, a change, a republish) is signed over
// the JSON the store keeps; clears stay empty and unsigned.
func TestControllerSignsEveryDesiredState(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	st := openStore(t, t.TempDir())
	rec := newRecorder()
	apply(t, st, dev("a"), dev("b"), depl("web", "nginx:1"))
	c, err := New(Options{Store: st, Conn: rec, Signer: testSigner{key}, StatusDebounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-c.Ready()
	apply(t, st, depl("web", "nginx:2"))
	eventually(t, "the change", func() bool { d := rec.desired(t, "a"); return d != nil && d.Generation == 2 })
	c.RepublishAll()
	eventually(t, "the republish", func() bool { return rec.count("fleet/v1/devices/", "/desired") >= 6 })
	if _, err := st.Delete(t.Context(), schema.KindDevice, "b", "", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the clear", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		_, ok := rec.retained["fleet/v1/devices/b/desired"]
		return !ok
	})

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range rec.msgs {
		if !strings.HasSuffix(m.topic, "/desired") {
			continue
		}
		if len(m.payload) == 0 {
			continue // a clear
		}
		canonical, _, err := schema.VerifyDesiredState(m.payload, pub)
		if err != nil {
			t.Errorf("%s: %v: %s", m.topic, err, m.payload)
			continue
		}
		device := strings.TrimSuffix(strings.TrimPrefix(m.topic, "fleet/v1/devices/"), "/desired")
		if !strings.Contains(string(canonical), `"device":"`+device+`"`) || strings.Contains(string(canonical), `"signature"`) {
			t.Errorf("%s: canonical bytes %s", m.topic, canonical)
		}
	}
}
