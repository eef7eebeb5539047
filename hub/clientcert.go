package hub

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"time"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/schema"
)

// clientCertValidity is the lifetime of a device's client certificate.
const clientCertValidity = 365 * 24 * time.Hour

// maxCSRBody bounds the body of POST /v1/devices/{name}/certificate.
const maxCSRBody = 16 << 10

// clientCA signs devices' client certificates with the hub's own CA (the
// one in the data directory, ca.crt and ca.key): at enrollment, and on
// POST /v1/devices/{name}/certificate for devices added with a token.
// The embedded broker verifies client certificates against it
// (--mqtt-client-certs).
type clientCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
	now  func() time.Time
	// mode is --mqtt-client-certs.
	mode broker.ClientCertMode
}

// newClientCA loads the hub's CA from dataDir, creating it if there is
// none yet (a hub with --tls-cert and --tls-key has no CA of its own
// until client certificates are asked for).
func newClientCA(dataDir string, log *slog.Logger) (*clientCA, error) {
	ca, key, caPEM, err := ensureCA(dataDir, time.Now(), log)
	if err != nil {
		return nil, fmt.Errorf("client certificates: %w", err)
	}
	return &clientCA{cert: ca, key: key, pem: caPEM, now: time.Now, mode: broker.ClientCertsOff}, nil
}

// pool is the CA as a pool for the broker's ClientCAs.
func (c *clientCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// parseCSR decodes a PEM certificate signing request, checks its
// signature and that it is for device (CommonName). Errors wrap
// schema.ErrInvalid.
func parseCSR(csrPEM, device string) (*x509.CertificateRequest, error) {
	blk, _ := pem.Decode([]byte(csrPEM))
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("csr: want a PEM CERTIFICATE REQUEST: %w", schema.ErrInvalid)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("csr: %w: %w", schema.ErrInvalid, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr: signature: %w: %w", schema.ErrInvalid, err)
	}
	if csr.Subject.CommonName != device {
		return nil, fmt.Errorf("csr: common name %q: a certificate for device %q must name it: %w", csr.Subject.CommonName, device, schema.ErrInvalid)
	}
	return csr, nil
}

// sign issues the client certificate of device for csr: CommonName the
// device's name, client authentication only, one year (never past the
// CA's end). It returns the certificate's PEM.
func (c *clientCA) sign(csr *x509.CertificateRequest, device string) ([]byte, time.Time, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("client certificate of %s: serial number: %w", device, err)
	}
	now := c.now()
	notAfter := now.Add(clientCertValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: device, Organization: []string{"Fleet devices"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, csr.PublicKey, c.key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("client certificate of %s: sign: %w", device, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), notAfter, nil
}

// setupClientCerts makes the CA that signs devices' client certificates,
// or nil. The hub has one when it has its own CA (devices then get a
// certificate at enrollment even with --mqtt-client-certs=off, ready for
// the day it is turned on), or when client certificates are asked for.
func setupClientCerts(opts Options, t *hubTLS, log *slog.Logger) (*clientCA, error) {
	mode, err := broker.ParseClientCertMode(opts.MQTTClientCerts)
	if err != nil {
		return nil, fmt.Errorf("--mqtt-client-certs: %w", err)
	}
	if mode != broker.ClientCertsOff && (opts.Broker != "" || !opts.mqttTLS()) {
		return nil, fmt.Errorf("--mqtt-client-certs=%s: needs the embedded broker's TLS listener (--mqtts-addr), not an external --broker", mode)
	}
	if t == nil || (t.ca == nil && mode == broker.ClientCertsOff) {
		return nil, nil
	}
	ca, err := newClientCA(opts.DataDir, log)
	if err != nil {
		return nil, err
	}
	ca.mode = mode
	return ca, nil
}

// brokerOptions sets the embedded broker's client certificate checks;
// a nil clientCA leaves them off.
func (c *clientCA) brokerOptions(o *broker.Options) {
	if c == nil {
		return
	}
	o.ClientCerts, o.ClientCAs = c.mode, c.pool()
}

// serveDeviceCertificate handles POST /v1/devices/{name}/certificate
// (admin only): it signs the client certificate of an existing device
// for the CSR in the body. That is how a device added with a token
// (`fleet device add`, no enrollment) gets one: its agent writes the CSR
// as <state-dir>/client.csr.
func (h *Hub) serveDeviceCertificate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if h.clientCA == nil {
		api.WriteStatus(w, api.NewStatus(http.StatusConflict, api.ReasonConflict,
			"the hub has no CA of its own to sign client certificates with (run it without --tls-cert, or with --mqtt-client-certs)", nil))
		return
	}
	if _, err := h.store.Get(r.Context(), schema.KindDevice, name); err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	var req schema.DeviceCertificateRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCSRBody+1))
	if err == nil && len(body) > maxCSRBody {
		err = fmt.Errorf("body over %d bytes", maxCSRBody)
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		api.WriteError(w, r, h.log, fmt.Errorf("certificate request: %w: %w", schema.ErrInvalid, err))
		return
	}
	csr, err := parseCSR(req.CSR, name)
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	certPEM, notAfter, err := h.clientCA.sign(csr, name)
	if err != nil {
		api.WriteError(w, r, h.log, err)
		return
	}
	h.log.Info("signed a device's client certificate", "device", name, "expires", notAfter.Format(time.DateOnly))
	api.WriteJSON(w, http.StatusOK, schema.DeviceCertificate{
		Device: name, Certificate: string(certPEM), NotAfter: notAfter, CA: string(h.clientCA.pem),
	})
}
