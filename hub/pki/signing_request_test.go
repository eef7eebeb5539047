package pki

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// TestSignRequestVerifiesWithThePinnedKey: a request the Signer signs
// verifies with its public key (what devices pin), and after a rotation
// with the new key only.
func TestSignRequestVerifiesWithThePinnedKey(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadOrCreateSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	check := func(key []byte) error {
		r := schema.Request{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest},
			ID: "0123456789abcdef0123456789abcdef", Device: "pi-1", Op: schema.OpTop}
		b, err := schema.EncodeSignedRequest(&r, time.Now(), s.SignRequest)
		if err != nil {
			t.Fatal(err)
		}
		_, err = schema.VerifyRequest(b, schema.RequestCheck{Key: key, Kind: schema.KindRequest, Device: "pi-1", Now: time.Now()}, schema.DecodeRequest)
		return err
	}
	old := s.PublicKey()
	if err := check(old); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rotate(); err != nil {
		t.Fatal(err)
	}
	if err := check(s.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := check(old); err == nil {
		t.Fatal("a request signed after the rotation verifies with the old key")
	}
}

// BenchmarkSignRequest: what signing costs the hub per request (an exec;
// an ack, the most frequent; a stdin chunk of 16 KiB), and the bytes the
// nonce, the expiry and the signature add to its payload.
func BenchmarkSignRequest(b *testing.B) {
	s, err := LoadOrCreateSigner(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    schema.Request
	}{
		{"exec", schema.Request{Op: schema.OpExec, Window: 8, Deadline: time.Now().UTC(),
			Exec: &schema.ExecOptions{Pod: "web", Command: []string{"cat", "/etc/hostname"}}}},
		{"ack", schema.Request{Op: schema.OpAck, Ack: 1234}},
		{"stdin-16KiB", schema.Request{Op: schema.OpStdin, Data: bytes.Repeat([]byte("x"), schema.MaxChunkBytes), Seq: 7}},
	} {
		c.r.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest}
		c.r.ID, c.r.Device = "0123456789abcdef0123456789abcdef", "pi-1"
		b.Run(c.name, func(b *testing.B) {
			plain, _ := json.Marshal(c.r)
			var n int
			b.ReportAllocs()
			for b.Loop() {
				r := c.r
				p, err := schema.EncodeSignedRequest(&r, time.Now(), s.SignRequest)
				if err != nil {
					b.Fatal(err)
				}
				n = len(p)
			}
			b.ReportMetric(float64(n-len(plain)), "bytes-added/req")
			b.ReportMetric(float64(len(plain)), "bytes-unsigned/req")
		})
	}
}
