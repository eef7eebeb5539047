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

// fuzzSigningKey is the fuzz targets' hub key: fixed, so that a saved
// corpus entry means the same on every run.
var fuzzSigningKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// fuzzSigned are the states the fuzz targets' hub signed, by canonical
// bytes, and their signed payloads.
var fuzzSigned = func() map[string][]byte {
	m := map[string][]byte{}
	for _, c := range []string{`{"device":"pi-1","generation":1}`, `{"device":"pi-1","generation":2,"pods":[{"name":"web"}]}`} {
		signed, err := schema.SignDesiredState([]byte(c), fuzzSigningKey, nil)
		if err != nil {
			panic(err)
		}
		m[c] = signed
	}
	return m
}()

// FuzzSplitSignedDesiredState: whatever the payload, a split that succeeds
// gives a JSON object and a signature member, and a payload that verifies
// with the hub's key carries exactly a state the hub signed: no byte of
// the canonical state can be changed, added or taken away unnoticed.
func FuzzSplitSignedDesiredState(f *testing.F) {
	for _, signed := range fuzzSigned {
		f.Add(signed)
	}
	f.Add([]byte(`{"a":1,"signature":{}}`))
	pub := pubOf(fuzzSigningKey)
	f.Fuzz(func(t *testing.T, payload []byte) {
		canonical, sig, err := schema.SplitSignedDesiredState(payload)
		if err != nil {
			return
		}
		if sig == nil || len(canonical) == 0 || canonical[len(canonical)-1] != '}' {
			t.Fatalf("split %q: %q %v", payload, canonical, sig)
		}
		if sig.Verify(canonical, pub) != nil {
			return
		}
		if _, ok := fuzzSigned[string(canonical)]; !ok {
			t.Fatalf("payload %q verifies, but the hub never signed its state %q", payload, canonical)
		}
	})
}

// FuzzSignedDesiredStateMutation: one byte of a signed payload changed
// (XORed with a fuzzed non-zero value) is refused, unless the change is
// inside the signature member and decodes to the same member (encoding/json
// matches member names without regard to case): the state a device would
// run is never one the hub did not sign.
func FuzzSignedDesiredStateMutation(f *testing.F) {
	f.Add(uint32(10), byte(1))
	f.Add(uint32(25), byte(0x20))
	f.Add(uint32(1000), byte(0xff))
	pub := pubOf(fuzzSigningKey)
	f.Fuzz(func(t *testing.T, pos uint32, xor byte) {
		if xor == 0 {
			return
		}
		for want, signed := range fuzzSigned {
			payload := bytes.Clone(signed)
			i := int(pos % uint32(len(payload)))
			payload[i] ^= xor
			canonical, _, err := schema.VerifyDesiredState(payload, pub)
			if err == nil && string(canonical) != want {
				t.Fatalf("byte %d ^ %#x: %q verifies as %q, the hub signed %q", i, xor, payload, canonical, want)
			}
			if err == nil && i < len(want)-1 {
				t.Fatalf("byte %d ^ %#x of the canonical state %q went unnoticed", i, xor, want)
			}
		}
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
