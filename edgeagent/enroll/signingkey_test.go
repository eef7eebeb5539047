package enroll

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// TestEnrollPinsHubSigningKey: the hub's signing key in the enrollment
// answer is pinned in the state directory; a malformed one fails the
// enrollment rather than leaving the agent to trust on first use.
func TestEnrollPinsHubSigningKey(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key := schema.EncodeSigningKey(pub)
	h := startFakeHub(t, func(_ int, req schema.EnrollRequest) (schema.EnrollResponse, bool) {
		if req.Device == "bad-key" {
			return schema.EnrollResponse{Device: req.Device, Token: "t", SigningKey: "AAAA"}, true
		}
		return schema.EnrollResponse{Device: req.Device, Token: "t", SigningKey: key, SigningKeyID: schema.SigningKeyID(pub)}, true
	})
	dir := t.TempDir()
	if _, err := Enroll(ctxT(t), options(t, h, dir)); err != nil {
		t.Fatal(err)
	}
	p, err := trust.Load(dir)
	if err != nil || !p.Key().Equal(pub) {
		t.Fatalf("pinned %v, %v", p.Key(), err)
	}

	o := options(t, h, t.TempDir())
	o.Device = "bad-key"
	if _, err := Enroll(ctxT(t), o); err == nil {
		t.Fatal("enrolled with a malformed signing key")
	}
	if _, err := Stored(o.StateDir); err == nil {
		t.Fatal("identity saved despite the malformed signing key")
	}
}
