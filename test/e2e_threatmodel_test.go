package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleet/schema"
)

// TestE2EThreatModelClientCertOfAnotherDevice: on a hub with
// --mqtt-client-certs=required, a stolen device token is useless over TLS
// with another device's certificate (its key and all): dev-a's token with
// dev-b's certificate is refused, and so is dev-a's token alone; dev-b's
// token with its own certificate connects (the control: the certificate
// is a good one).
func TestE2EThreatModelClientCertOfAnotherDevice(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{Args: []string{"--mqtt-client-certs=required"}})
	tokA := addDevice(t, h, "dev-a", nil)
	tokB := addDevice(t, h, "dev-b", nil)
	certB := deviceClientCert(t, h, "dev-b")

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mustRead(t, h.CAFile)) {
		t.Fatal("no CA in " + h.CAFile)
	}
	connect := func(device, token string, certs []tls.Certificate) error {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(h.MQTTTLSURL).SetClientID(device).
			SetUsername(device).SetPassword(token).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).
			SetTLSConfig(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "localhost", MinVersion: tls.VersionTLS12}))
		tok := c.Connect()
		if !tok.WaitTimeout(15 * time.Second) {
			return errors.New("connect timed out")
		}
		if tok.Error() == nil {
			c.Disconnect(0)
		}
		return tok.Error()
	}
	if err := connect("dev-a", tokA, []tls.Certificate{certB}); err == nil {
		t.Error("dev-a's token with dev-b's client certificate was accepted over TLS")
	}
	if err := connect("dev-a", tokA, nil); err == nil {
		t.Error("dev-a's token without a client certificate was accepted over TLS")
	}
	if err := connect("dev-b", tokB, []tls.Certificate{certB}); err != nil {
		t.Errorf("dev-b's token with its own certificate: %v", err)
	}
}

// deviceClientCert makes a key and has the hub sign a client certificate
// for device (POST /v1/devices/{name}/certificate, as an admin would for
// a device enrolled without one).
func deviceClientCert(t *testing.T, h *Hub, device string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: device}}, key)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(schema.DeviceCertificateRequest{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))})
	if err != nil {
		t.Fatal(err)
	}
	var dc schema.DeviceCertificate
	if err := json.Unmarshal(mustDo(t, h, http.MethodPost, "/v1/devices/"+device+"/certificate", body, http.StatusOK), &dc); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(dc.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatalf("the hub's certificate for %s: %v", device, err)
	}
	return cert
}
