package enrollment

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

type fixedKey struct{ pub ed25519.PublicKey }

func (k fixedKey) PublicKey() ed25519.PublicKey { return k.pub }

// TestAnswer: an enrollment gives the device a token and the signing key
// and is audited with its labels; a reserved name is refused with its
// reason, audited too.
func TestAnswer(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir(), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	token, _, err := st.CreateBootstrapToken(t.Context(), store.BootstrapTokenSpec{Labels: map[string]string{"site": "lab", "arch": "arm64"}})
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var audited []schema.AuditEntry
	h := New(Options{
		Store: st, Logger: slog.New(slog.DiscardHandler), Signer: fixedKey{pub},
		Reserved: func(name string) bool { return name == "fleet-hub" },
		Audit:    func(_ string, e schema.AuditEntry) { audited = append(audited, e) },
	})
	req := func(device string) []byte {
		b, _ := json.Marshal(schema.EnrollRequest{Token: token, Secret: "0123456789abcdef0123456789abcdef", Device: device})
		return b
	}
	if resp := h.answer(t.Context(), "req_0123456789abcdef", req("fleet-hub")); resp.Reason != schema.EnrollNameTaken || resp.Token != "" {
		t.Errorf("reserved name: %+v", resp)
	}
	resp := h.answer(t.Context(), "req_0123456789abcdeg", req("pi-1"))
	if resp.Reason != "" || resp.Token == "" || resp.SigningKeyID != schema.SigningKeyID(pub) || !st.VerifyToken("pi-1", resp.Token) {
		t.Fatalf("enrollment: %+v", resp)
	}
	if len(audited) != 2 || audited[0].Result != schema.EnrollNameTaken || audited[1].Result != schema.AuditOK ||
		audited[1].Object != "devices/pi-1" || audited[1].Detail != "labels arch=arm64,fleet/device=pi-1,site=lab" {
		t.Errorf("audited %+v", audited)
	}
}

func TestFormatLabels(t *testing.T) {
	for _, tt := range []struct {
		in   map[string]string
		want string
	}{
		{nil, "none"},
		{map[string]string{"b": "2", "a": "1"}, "a=1,b=2"},
	} {
		if got := formatLabels(tt.in); got != tt.want {
			t.Errorf("formatLabels(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
