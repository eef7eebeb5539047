package pki

import (
	"crypto/x509"
	"time"
)

// ServerNotAfter is when the certificate the TLS listeners present now
// expires (zero if it cannot be read). It reads the current certificate
// on every call, so a reloaded or renewed one shows at once.
func (t *ServerTLS) ServerNotAfter() time.Time {
	if t == nil {
		return time.Time{}
	}
	c := t.cert.Load()
	if c == nil {
		return time.Time{}
	}
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	if len(c.Certificate) == 0 {
		return time.Time{}
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return time.Time{}
	}
	return leaf.NotAfter
}

// CANotAfter is when the hub's own active CA expires (zero without
// one); after a CA rotation, the new CA's end.
func (t *ServerTLS) CANotAfter() time.Time {
	if t == nil || t.cas == nil {
		return time.Time{}
	}
	ca, _ := t.cas.Active()
	return ca.NotAfter
}

// NotAfter is when the active CA of client certificates expires.
func (c *ClientCA) NotAfter() time.Time {
	if c == nil || c.cas == nil {
		return time.Time{}
	}
	ca, _ := c.cas.Active()
	return ca.NotAfter
}
