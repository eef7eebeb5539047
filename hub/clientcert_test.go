package hub

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/edgeagent/enroll"
	"github.com/fleetmq/fleet/schema"
)

func parseCertPEM(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", s)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHubClientCertificates: an agent enrolling with a hub that has its
// own CA gets a client certificate (saved 0644 beside its 0600 key); an
// admin signs one for a token device over the API; a CSR for another
// device, an unknown device and a non-admin are refused.
func TestHubClientCertificates(t *testing.T) {
	h := startHub(t, Options{HTTPSAddr: "127.0.0.1:0", MQTTTLSAddr: "127.0.0.1:0", MQTTClientCerts: "required"})
	bt := createBootstrapToken(t, h, `{}`)
	pool, err := client.CertPool(h.Info().CA)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	url := "ssl://" + h.Info().MQTTTLSAddr
	id, err := enroll.Enroll(t.Context(), enroll.Options{
		Broker: url, TLSConfig: tlsCfg, BootstrapToken: bt.Token, Device: "pi-1", StateDir: dir, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	connect := func(cfg *tls.Config, token string) error {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("pi-1").SetUsername("pi-1").SetPassword(token).
			SetTLSConfig(cfg).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
		tok := c.Connect()
		if !tok.WaitTimeout(10 * time.Second) {
			return errors.New("connect timed out")
		}
		if tok.Error() == nil {
			c.Disconnect(0)
		}
		return tok.Error()
	}
	// Required: the token alone is refused over TLS; with the
	// certificate the device connects.
	if err := connect(tlsCfg, id.Token); err == nil {
		t.Error("pi-1 connected without its client certificate")
	}
	if err := connect(enroll.WithClientCert(tlsCfg, dir), id.Token); err != nil {
		t.Errorf("pi-1 with its client certificate: %v", err)
	}
	if err := connect(enroll.WithClientCert(tlsCfg, dir), "wrong"); err == nil {
		t.Error("pi-1's certificate let a wrong token in")
	}
	b, err := os.ReadFile(filepath.Join(dir, enroll.ClientCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if c := parseCertPEM(t, string(b)); c.Subject.CommonName != "pi-1" {
		t.Errorf("enrolled certificate CN %q", c.Subject.CommonName)
	}
	if st, err := os.Stat(filepath.Join(dir, enroll.ClientKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("client key: %v %v", st, err)
	}

	// A token device: the admin API signs the CSR its agent wrote.
	if code, body := h.do(t, h.token, "POST", "/v1/devices", `{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":"pi-2"}}`); code != 201 {
		t.Fatalf("add pi-2: %d %s", code, body)
	}
	dir2 := t.TempDir()
	csrPath, err := enroll.WriteClientCSR(dir2, "pi-2")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := os.ReadFile(csrPath)
	if err != nil {
		t.Fatal(err)
	}
	body := func(csr []byte) string {
		b, _ := json.Marshal(schema.DeviceCertificateRequest{CSR: string(csr)})
		return string(b)
	}
	code, out := h.do(t, h.token, "POST", "/v1/devices/pi-2/certificate", body(csr))
	var dc schema.DeviceCertificate
	if err := json.Unmarshal(out, &dc); code != 200 || err != nil || dc.Device != "pi-2" || dc.CA != string(h.Info().CA) {
		t.Fatalf("sign pi-2's CSR: %d %s %v", code, out, err)
	}
	if err := enroll.SaveClientCert(dir2, []byte(dc.Certificate)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(csrPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the CSR is still there once the certificate is saved: %v", err)
	}
	// Another device's certificate does not match the key.
	if err := enroll.SaveClientCert(dir2, b); err == nil {
		t.Error("saved pi-1's certificate for pi-2's key")
	}

	code, out = h.do(t, h.token, "POST", "/v1/credentials", `{"name":"mon","role":"monitor"}`)
	var mon struct{ Token string }
	if err := json.Unmarshal(out, &mon); code != 201 || err != nil || mon.Token == "" {
		t.Fatalf("create monitor: %d %s", code, out)
	}
	monitor := mon.Token
	for _, tc := range []struct {
		name, token, path, body string
		code                    int
	}{
		{"pi-2's CSR for pi-1", h.token, "/v1/devices/pi-1/certificate", body(csr), 400},
		{"unknown device", h.token, "/v1/devices/pi-9/certificate", body(csr), 404},
		{"not JSON", h.token, "/v1/devices/pi-2/certificate", "{{", 400},
		{"too large", h.token, "/v1/devices/pi-2/certificate", `{"csr":"` + strings.Repeat("x", maxCSRBody) + `"}`, 400},
		{"a monitor", monitor, "/v1/devices/pi-2/certificate", body(csr), 403},
	} {
		if code, out := h.do(t, tc.token, "POST", tc.path, tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, out, tc.code)
		}
	}

	// Revocation: a deleted device's certificate opens nothing.
	if code, out := h.do(t, h.token, "DELETE", "/v1/devices/pi-1", ""); code != 200 && code != 204 {
		t.Fatalf("delete pi-1: %d %s", code, out)
	}
	if err := connect(enroll.WithClientCert(tlsCfg, dir), id.Token); err == nil {
		t.Error("a deleted device connected with its certificate and token")
	}
}
