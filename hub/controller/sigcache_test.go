package controller

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// countingSigner is a fake ReusableSigner: it signs with a real key, as
// hub/pki.Signer does, counts its signatures and can rotate its key.
type countingSigner struct {
	mu    sync.Mutex
	key   ed25519.PrivateKey
	signs atomic.Int64
}

func newCountingSigner(t *testing.T) *countingSigner {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &countingSigner{key: key}
}

func (s *countingSigner) current() ed25519.PrivateKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key
}

func (s *countingSigner) SignDesiredState(canonical []byte) ([]byte, error) {
	s.signs.Add(1)
	return schema.SignDesiredState(canonical, s.current(), nil)
}

func (s *countingSigner) SignatureIdentity() string {
	return schema.SigningKeyID(s.current().Public().(ed25519.PublicKey))
}

func (s *countingSigner) rotate(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.key = key
	s.mu.Unlock()
}

// runSigned runs a controller with signer on st until stop, once its
// first pass is done.
func runSigned(t *testing.T, st *store.Store, pub Publisher, signer DesiredSigner) (stop func()) {
	t.Helper()
	c, err := New(Options{Store: st, Conn: pub, Signer: signer, StatusDebounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("controller not ready within 10s")
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// desiredPayloads are the retained desired payloads of devices.
func desiredPayloads(r *recorder, devices []string) map[string][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]byte{}
	for _, d := range devices {
		if p, ok := r.retained["fleet/v1/devices/"+d+"/desired"]; ok {
			out[d] = p
		}
	}
	return out
}

// TestRestartRepublishesKeptSignatures: a hub restarted on the same
// store (and the same key) republishes every desired state byte for byte
// as it was signed before, without signing any again; they verify under
// the key, over the stored JSON. After a key rotation the next restart
// signs every one afresh with the new key, and a changed desired state is
// signed again, not given the old signature.
func TestRestartRepublishesKeptSignatures(t *testing.T) {
	dir := t.TempDir()
	var devices []string
	var objs []schema.Object
	for i := range 20 {
		name := fmt.Sprintf("d%02d", i)
		devices = append(devices, name)
		objs = append(objs, dev(name))
	}
	objs = append(objs, depl("web", "nginx:1"))
	signer := newCountingSigner(t)

	st := openStore(t, dir)
	apply(t, st, objs...)
	pub := newRecorder()
	runSigned(t, st, pub, signer)()
	before := desiredPayloads(pub, devices)
	if len(before) != len(devices) || signer.signs.Load() != int64(len(devices)) {
		t.Fatalf("first run: %d states published, %d signatures; want %d of each", len(before), signer.signs.Load(), len(devices))
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The restart: a new store handle, an empty broker, the same key.
	st = openStore(t, dir)
	signer.signs.Store(0)
	pub = newRecorder()
	stop := runSigned(t, st, pub, signer)
	after := desiredPayloads(pub, devices)
	if n := signer.signs.Load(); n != 0 {
		t.Errorf("restart signed %d desired states, want 0 (kept signatures)", n)
	}
	pubKey := signer.current().Public().(ed25519.PublicKey)
	for _, d := range devices {
		if !bytes.Equal(after[d], before[d]) {
			t.Errorf("%s: republished\n%s\nwant, byte for byte\n%s", d, after[d], before[d])
		}
		if _, _, err := schema.VerifyDesiredState(after[d], pubKey); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	// A change is signed afresh: two images, so every device's state.
	apply(t, st, depl("web", "nginx:2"))
	eventually(t, "the change", func() bool {
		d := pub.desired(t, devices[0])
		return d != nil && d.Generation == 2
	})
	eventually(t, "the change everywhere", func() bool { return signer.signs.Load() == int64(len(devices)) })
	for d, p := range desiredPayloads(pub, devices) {
		if _, _, err := schema.VerifyDesiredState(p, pubKey); err != nil {
			t.Errorf("%s after the change: %v", d, err)
		}
	}
	stop()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// A rotated key: nothing kept is reused.
	signer.rotate(t)
	signer.signs.Store(0)
	st = openStore(t, dir)
	pub = newRecorder()
	runSigned(t, st, pub, signer)()
	if n := signer.signs.Load(); n != int64(len(devices)) {
		t.Errorf("restart after a rotation signed %d desired states, want %d", n, len(devices))
	}
	newKey := signer.current().Public().(ed25519.PublicKey)
	for d, p := range desiredPayloads(pub, devices) {
		if _, _, err := schema.VerifyDesiredState(p, newKey); err != nil {
			t.Errorf("%s after the rotation: %v", d, err)
		}
	}
}

// TestSigEntryRefusesOtherBytes: a kept signature is reused only for the
// same canonical bytes under the same identity, and survives its stored
// form.
func TestSigEntryRefusesOtherBytes(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	canonical := []byte(`{"device":"a","generation":3}`)
	signed, err := schema.SignDesiredState(canonical, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256Sum(canonical)
	e := newSigEntry(canonical, signed, "id-1", sum)
	if e == nil {
		t.Fatal("no entry from a signed payload")
	}
	e = decodeSigEntry(e.encode())
	if e == nil {
		t.Fatal("stored entry does not decode")
	}
	if got, ok := e.signedPayload(canonical, "id-1", sum); !ok || !bytes.Equal(got, signed) {
		t.Fatalf("reuse = %q, %v; want %q", got, ok, signed)
	}
	other := []byte(`{"device":"a","generation":4}`)
	if _, ok := e.signedPayload(other, "id-1", sha256Sum(other)); ok {
		t.Error("reused for other bytes")
	}
	if _, ok := e.signedPayload(canonical, "id-2", sum); ok {
		t.Error("reused under another identity")
	}
	for _, bad := range [][]byte{nil, []byte("short"), bytes.Repeat([]byte{0xff}, 40)} {
		if decodeSigEntry(bad) != nil {
			t.Errorf("decodeSigEntry(%q) decoded", bad)
		}
	}
	if newSigEntry(canonical, []byte(`{"device":"b","generation":3,"signature":{}}`), "id-1", sum) != nil {
		t.Error("kept the signature of other bytes")
	}
}
