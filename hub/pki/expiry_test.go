package pki

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestNotAfter: the expiry the metrics export is the real certificates'
// own NotAfter, for the hub's CA, its server certificate and the client CA.
func TestNotAfter(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Now()
	st, err := SetupServerTLS("", "", dir, []string{"127.0.0.1"}, now, log)
	if err != nil {
		t.Fatal(err)
	}
	ca, srv := st.CANotAfter(), st.ServerNotAfter()
	if !ca.After(now) || !srv.After(now) || srv.After(ca) {
		t.Fatalf("CA expires %v, server certificate %v: want both after now, the server's not after the CA's", ca, srv)
	}
	cert := st.cert.Load()
	if cert == nil || len(cert.Certificate) == 0 {
		t.Fatal("no server certificate")
	}
	cc, err := NewClientCA(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	if !cc.NotAfter().Equal(ca) {
		t.Errorf("client CA expires %v, want the hub's CA's %v (the same CA)", cc.NotAfter(), ca)
	}
	var none *ServerTLS
	if !none.ServerNotAfter().IsZero() || !none.CANotAfter().IsZero() {
		t.Error("a hub without TLS has expiries")
	}
}
