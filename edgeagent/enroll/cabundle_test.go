package enroll

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func caPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// TestWithCABundle: without a bundle the agent verifies the broker as
// its configuration says (here: the pinned CA hash); once the hub's
// bundle is saved it is the only trust, read at each handshake: a
// rotation bundle with both CAs accepts either hub, the bundle left after
// the old CA retired refuses the old one. TrustedCAs follows.
func TestWithCABundle(t *testing.T) {
	caOld, addrOld := newCAServer(t)
	caNew, addrNew := newCAServer(t)
	dir := t.TempDir()
	base, err := PinCATLSConfig(&tls.Config{ServerName: "127.0.0.1"}, schema.CAHash(caOld), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := WithCABundle(base, dir, "127.0.0.1")
	dial := func(addr string) error {
		c, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(addrOld); err != nil {
		t.Fatalf("no bundle, the pinned CA's hub: %v", err)
	}
	if err := dial(addrNew); err == nil {
		t.Fatal("no bundle: a hub of another CA was accepted")
	}
	if got := TrustedCAs(dir, ""); got != nil {
		t.Errorf("TrustedCAs with nothing saved: %v", got)
	}

	both := append(caPEM(caOld), caPEM(caNew)...)
	if changed, err := SaveCABundle(dir, both); err != nil || !changed {
		t.Fatalf("save the rotation bundle: %v %v", changed, err)
	}
	if changed, err := SaveCABundle(dir, both); err != nil || changed {
		t.Fatalf("save the same bundle again: %v %v", changed, err)
	}
	for _, addr := range []string{addrOld, addrNew} {
		if err := dial(addr); err != nil {
			t.Errorf("the rotation bundle refuses %s: %v", addr, err)
		}
	}
	want := []string{schema.CAHash(caOld), schema.CAHash(caNew)}
	slices.Sort(want)
	if got := TrustedCAs(dir, ""); !slices.Equal(got, want) {
		t.Errorf("TrustedCAs during the rotation = %v, want %v", got, want)
	}

	if _, err := SaveCABundle(dir, caPEM(caNew)); err != nil {
		t.Fatal(err)
	}
	if err := dial(addrOld); err == nil {
		t.Error("the old CA's hub is accepted after the old CA was retired")
	}
	if err := dial(addrNew); err != nil {
		t.Errorf("the new CA's hub after the retirement: %v", err)
	}
	if got := TrustedCAs(dir, ""); len(got) != 1 || got[0] != schema.CAHash(caNew) {
		t.Errorf("TrustedCAs after the retirement = %v", got)
	}

	// Bundles that are not CA certificates are refused, the file kept.
	for name, b := range map[string][]byte{
		"empty":   nil,
		"garbage": []byte("not pem"),
		"a key":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}),
	} {
		if _, err := SaveCABundle(dir, b); err == nil {
			t.Errorf("%s bundle saved", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, CABundleFile)); string(b) != string(caPEM(caNew)) {
		t.Error("a refused bundle replaced the saved one")
	}
	if WithCABundle(nil, dir, "") != nil {
		t.Error("a plain broker got a TLS configuration")
	}
}
