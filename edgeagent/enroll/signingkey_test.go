package enroll

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// TestEnrollPinsHubSigningKey: the hub's signing key in the enrollment
// answer is pinned in the state directory when it is the key the agent
// pinned already (its join string) or the agent trusts the first key;
// over plain MQTT it is not pinned otherwise; another key than the one
// pinned, or a malformed one, fails the enrollment and saves nothing.
// (Over TLS verified by the CA hash it is pinned: test/e2e_tls_test.go.)
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
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		pinned   ed25519.PublicKey
		firstUse bool
		want     ed25519.PublicKey // pinned afterwards (nil: none)
		fails    bool
	}{
		{name: "the key the join string pinned", pinned: pub, want: pub},
		{name: "plain MQTT, nothing pinned: not pinned", want: nil},
		{name: "plain MQTT, trusting the first key", firstUse: true, want: pub},
		{name: "another key than the one pinned", pinned: other, fails: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			o := options(t, h, dir)
			o.SigningKey, o.InsecureTrustFirstKey = tt.pinned, tt.firstUse
			_, err := Enroll(ctxT(t), o)
			if tt.fails {
				if err == nil || !strings.Contains(err.Error(), "someone in the middle") {
					t.Fatalf("Enroll = %v, want a refusal of the other key", err)
				}
				if _, err := Stored(dir); err == nil {
					t.Fatal("identity saved despite the other key")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := trust.Load(dir)
			if err != nil || !p.Key().Equal(tt.want) {
				t.Fatalf("pinned %v, %v; want %v", p.Key(), err, tt.want)
			}
		})
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
