package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// CertPool returns a pool of the PEM certificates in pem: the only roots
// a pinned client trusts.
func CertPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("certificate authority: no PEM certificate")
	}
	return pool, nil
}

// PinnedHTTPClient returns an HTTP client that trusts only the CA in
// caPEM: a hub whose certificate does not chain to it is refused, with an
// error that says so (see ErrUntrustedHub). It has no overall timeout, so
// watches work; deadlines come from each request's context.
func PinnedHTTPClient(caPEM []byte, source string) (*http.Client, error) {
	pool, err := CertPool(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	// Exec hijacks its connection: HTTP/1.1 only.
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	tr.TLSHandshakeTimeout = 10 * time.Second
	return &http.Client{Transport: &pinnedTransport{rt: tr, source: source}}, nil
}

// ErrUntrustedHub is wrapped by the error of a request to a hub whose
// certificate does not chain to the pinned CA.
var ErrUntrustedHub = errors.New("the hub's certificate is not signed by the pinned certificate authority")

// pinnedTransport names the pinned CA in a verification failure.
type pinnedTransport struct {
	rt     http.RoundTripper
	source string
}

func (p *pinnedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.rt.RoundTrip(r)
	var verr *tls.CertificateVerificationError
	if err != nil && errors.As(err, &verr) {
		return nil, fmt.Errorf("%w (certificate-authority-data from %s): refusing to talk to %s; if the hub's CA really changed, set the new one with \"fleet config set-context NAME --certificate-authority FILE\": %w",
			ErrUntrustedHub, p.source, r.URL.Host, err)
	}
	return resp, err
}
