package enroll

import (
	"crypto/rand"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/devicekey"
)

// TestEnrollSendsPublicKey: the request carries the device's public key,
// so that the hub can seal Secrets to the device before its first status.
func TestEnrollSendsPublicKey(t *testing.T) {
	h := startFakeHub(t, grant)
	key, err := devicekey.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o := options(t, h, t.TempDir())
	o.PublicKey = key.PublicKey()
	if _, _, err := Ensure(ctxT(t), o); err != nil {
		t.Fatal(err)
	}
	if seen := h.seen(); len(seen) != 1 || seen[0].req.PublicKey != key.PublicKey() {
		t.Fatalf("hub saw %+v, want the public key %s", seen, key.PublicKey())
	}
}
