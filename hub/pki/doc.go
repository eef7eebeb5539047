// Package pki is the hub's key material, all of it kept in the data
// directory and nowhere else:
//
//   - the hub's own CA (ca.crt 0644, ca.key 0600; ECDSA P-256, 10 years),
//     made on first start unless the hub is given --tls-cert and
//     --tls-key, and never replaced silently: a CA key without its
//     certificate, or the reverse, is an error;
//   - the server certificate the HTTPS and MQTT-over-TLS listeners present
//     (hub.crt 0644 with the CA in its chain, hub.key 0600; one year, never
//     past the CA's end), reissued on start when it is within 30 days of
//     its end, not signed by the CA, or lacks one of the hub's names; or
//     the given certificate, read again by ServerTLS.Reload (SIGHUP);
//   - the ClientCA, which signs devices' client certificates (CommonName
//     the device's name, client authentication only, one year) for a CSR
//     that names the device;
//   - the desired-state signing key (signing.key, and signing.key.previous
//     after a rotation, PKCS#8 PEM 0600; ed25519): Signer signs every
//     published desired state, with the previous key's endorsement of the
//     current one after RotateSigningKey or Signer.Rotate.
//
// Keys are written 0600 and certificates 0644, each file atomically
// (store.WriteFileAtomic), the key before its certificate. The package
// knows nothing of HTTP, MQTT or the hub's options: package hub decides
// when to call it and serves what it makes.
package pki
