package schema_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func newSigningKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// canonicalState is a DesiredState as the hub serializes it.
func canonicalState(t testing.TB, labels map[string]string) []byte {
	t.Helper()
	ds := schema.DesiredState{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDesiredState},
		Device:   "pi-1", Generation: 7, Store: "s1",
		Pods: []schema.Pod{{Name: "web", Annotations: labels, Spec: schema.PodSpec{Containers: []schema.Container{{Name: "web", Image: "nginx:1"}}}}},
	}
	b, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSignVerifyRoundTrip(t *testing.T) {
	key := newSigningKey(t)
	canonical := canonicalState(t, nil)
	payload, err := schema.SignDesiredState(canonical, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, sig, err := schema.VerifyDesiredState(payload, pubOf(key))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !bytes.Equal(got, canonical) {
		t.Fatalf("canonical\n%s\nwant\n%s", got, canonical)
	}
	if sig.Alg != "ed25519" || sig.KeyID != schema.SigningKeyID(pubOf(key)) || len(sig.KeyID) != 16 {
		t.Fatalf("signature %+v", sig)
	}
	if signer, err := sig.SignerKey(); err != nil || !signer.Equal(pubOf(key)) {
		t.Fatalf("signer key %v, %v", signer, err)
	}
	// The signature member is last and decoders see it.
	if !strings.HasSuffix(string(payload), `"sig":"`+sig.Sig+`"}}`) {
		t.Fatalf("payload does not end with the signature member: %s", payload)
	}
	var ds schema.DesiredState
	if err := json.Unmarshal(payload, &ds); err != nil || ds.Signature == nil || ds.Signature.KeyID != sig.KeyID || ds.Generation != 7 {
		t.Fatalf("decoded %+v, %v", ds, err)
	}
	// Another key does not verify it.
	if _, _, err := schema.VerifyDesiredState(payload, pubOf(newSigningKey(t))); !errors.Is(err, schema.ErrBadSignature) {
		t.Fatalf("verify with another key: %v", err)
	}
}

func TestVerifyRefusesTampering(t *testing.T) {
	key := newSigningKey(t)
	payload, err := schema.SignDesiredState(canonicalState(t, map[string]string{"app": "web"}), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range payload {
		tampered := bytes.Clone(payload)
		tampered[i] ^= 0x01
		if _, _, err := schema.VerifyDesiredState(tampered, pubOf(key)); err == nil {
			t.Fatalf("byte %d (%q) flipped: still verifies: %s", i, payload[i], tampered)
		}
	}
	// A member added after the signature, or the signature moved before
	// other members, is refused.
	after := append(bytes.Clone(payload[:len(payload)-1]), `,"generation":99}`...)
	if _, _, err := schema.VerifyDesiredState(after, pubOf(key)); !errors.Is(err, schema.ErrBadSignature) {
		t.Fatalf("member after the signature: %v", err)
	}
	canonical, sig, err := schema.SplitSignedDesiredState(payload)
	if err != nil {
		t.Fatal(err)
	}
	sigJSON, _ := json.Marshal(sig)
	moved := []byte(`{"signature":` + string(sigJSON) + `,` + string(canonical[1:]))
	if _, _, err := schema.VerifyDesiredState(moved, pubOf(key)); err == nil {
		t.Fatalf("signature first: verifies")
	}
	notLast := []byte(string(canonical[:len(canonical)-1]) + `,"signature":` + string(sigJSON) + `,"x":1}`)
	if _, _, err := schema.VerifyDesiredState(notLast, pubOf(key)); !errors.Is(err, schema.ErrBadSignature) {
		t.Fatalf("signature not last: %v", err)
	}
	if _, _, err := schema.VerifyDesiredState(canonical, pubOf(key)); !errors.Is(err, schema.ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
	for _, bad := range []string{
		string(canonical[:len(canonical)-1]) + `,"signature":{"alg":"ed25519"`,
		string(canonical[:len(canonical)-1]) + `,"signature":{"alg":1}}`,
		`,"signature":{}}`,
	} {
		if _, _, err := schema.VerifyDesiredState([]byte(bad), pubOf(key)); !errors.Is(err, schema.ErrBadSignature) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestVerifyAdditiveFieldsAndNestedSignature(t *testing.T) {
	key := newSigningKey(t)
	// A newer hub's unknown fields, and a nested "signature" key (an
	// object inside an unknown field, a label value naming it), are part
	// of the canonical bytes like any other.
	canonical := canonicalState(t, map[string]string{"signature": `,"signature":{"x":1}`})
	canonical = append(canonical[:len(canonical)-1], `,"future":{"a":[1,2],"signature":{"alg":"none"}}}`...)
	payload, err := schema.SignDesiredState(canonical, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := schema.VerifyDesiredState(payload, pubOf(key))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !bytes.Equal(got, canonical) {
		t.Fatalf("canonical %s", got)
	}
	var ds schema.DesiredState
	if err := json.Unmarshal(payload, &ds); err != nil || ds.Pods[0].Annotations["signature"] != `,"signature":{"x":1}` {
		t.Fatalf("decoded %+v, %v", ds.Pods, err)
	}
}

func TestEndorsement(t *testing.T) {
	prev, next := newSigningKey(t), newSigningKey(t)
	e := schema.EndorseSigningKey(prev, pubOf(next))
	payload, err := schema.SignDesiredState(canonicalState(t, nil), next, &e)
	if err != nil {
		t.Fatal(err)
	}
	_, sig, err := schema.VerifyDesiredState(payload, pubOf(next))
	if err != nil {
		t.Fatal(err)
	}
	if sig.PreviousKeyID != schema.SigningKeyID(pubOf(prev)) {
		t.Fatalf("previousKeyId %q", sig.PreviousKeyID)
	}
	if err := sig.VerifyEndorsement(pubOf(prev), pubOf(next)); err != nil {
		t.Fatalf("endorsement: %v", err)
	}
	other := newSigningKey(t)
	if err := sig.VerifyEndorsement(pubOf(other), pubOf(next)); !errors.Is(err, schema.ErrBadSignature) {
		t.Fatalf("endorsement by another key: %v", err)
	}
	if err := sig.VerifyEndorsement(pubOf(prev), pubOf(other)); !errors.Is(err, schema.ErrBadSignature) {
		t.Fatalf("endorsement of another key: %v", err)
	}
	// A key the signature claims must match its ID.
	sig.PublicKey = schema.EncodeSigningKey(pubOf(other))
	if _, err := sig.SignerKey(); !errors.Is(err, schema.ErrBadSignature) {
		t.Fatalf("publicKey not matching keyId: %v", err)
	}
}

func TestParseSigningKey(t *testing.T) {
	pub := pubOf(newSigningKey(t))
	got, err := schema.ParseSigningKey(" " + schema.EncodeSigningKey(pub) + "\n")
	if err != nil || !got.Equal(pub) {
		t.Fatalf("parse: %v %v", got, err)
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if _, err := schema.ParseSigningKey(bad); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

func FuzzSplitSignedDesiredState(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signed, _ := schema.SignDesiredState([]byte(`{"device":"pi-1","generation":1}`), priv, nil)
	f.Add(signed)
	f.Add([]byte(`{"a":1,"signature":{}}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		canonical, sig, err := schema.SplitSignedDesiredState(payload)
		if err != nil {
			return
		}
		if sig == nil || len(canonical) == 0 || canonical[len(canonical)-1] != '}' {
			t.Fatalf("split %q: %q %v", payload, canonical, sig)
		}
		_ = sig.Verify(canonical, priv.Public().(ed25519.PublicKey))
	})
}

// BenchmarkSignDesiredState and BenchmarkVerifyDesiredState: the cost the
// hub adds to each publish and the agent to each payload.
func BenchmarkSignDesiredState(b *testing.B) {
	key := newSigningKey(b)
	canonical := canonicalState(b, map[string]string{"a": strings.Repeat("x", 1500)})
	b.SetBytes(int64(len(canonical)))
	for b.Loop() {
		if _, err := schema.SignDesiredState(canonical, key, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyDesiredState(b *testing.B) {
	key := newSigningKey(b)
	payload, err := schema.SignDesiredState(canonicalState(b, map[string]string{"a": strings.Repeat("x", 1500)}), key, nil)
	if err != nil {
		b.Fatal(err)
	}
	pub := pubOf(key)
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, _, err := schema.VerifyDesiredState(payload, pub); err != nil {
			b.Fatal(err)
		}
	}
}
