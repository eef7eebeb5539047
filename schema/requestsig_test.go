package schema

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

func testRequest() *Request {
	return &Request{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindRequest},
		ID: "0123456789abcdef0123456789abcdef", Device: "pi-1", Op: OpExec,
		Exec: &ExecOptions{Pod: "web", Command: []string{"id"}}}
}

// TestRequestSignatureChecks: a signed request verifies with the key
// that signed it, for its device, within its time; every other case is
// refused with the error that says why, and a request signature is never
// a desired state's (nor the other way round).
func TestRequestSignatureChecks(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	pub := key.Public().(ed25519.PublicKey)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	signWith := func(k ed25519.PrivateKey, at time.Time) []byte {
		b, err := EncodeSignedRequest(testRequest(), at, func(c []byte) ([]byte, error) { return SignRequest(c, k) })
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	check := func(p []byte, device string, at time.Time) error {
		_, err := VerifyRequest(p, RequestCheck{Key: pub, Kind: KindRequest, Device: device, Now: at}, DecodeRequest)
		return err
	}
	good := signWith(key, now)
	if err := check(good, "pi-1", now); err != nil {
		t.Fatalf("genuine: %v", err)
	}
	if err := check(good, "pi-1", now.Add(RequestExpiry+MaxRequestClockSkew)); err != nil {
		t.Fatalf("at the last moment of its skew: %v", err)
	}
	canonical, _, _ := SplitSignedRequest(good)
	dsSigned, _ := SignDesiredState(canonical, key, nil)
	for _, c := range []struct {
		name string
		p    []byte
		dev  string
		at   time.Time
		want error
	}{
		{"unsigned", canonical, "pi-1", now, ErrRequestUnsigned},
		{"other key", signWith(other, now), "pi-1", now, ErrRequestBadSignature},
		{"mutated", bytes.Replace(good, []byte(`"id"`), []byte(`"sh"`), 1), "pi-1", now, ErrRequestBadSignature},
		{"a desired-state signature", dsSigned, "pi-1", now, ErrRequestBadSignature},
		{"member after the signature", append(good[:len(good)-1], []byte(`,"op":"top"}`)...), "pi-1", now, ErrRequestBadSignature},
		{"other device", good, "pi-2", now, ErrRequestOtherDevice},
		{"expired", good, "pi-1", now.Add(RequestExpiry + MaxRequestClockSkew + time.Second), ErrRequestExpired},
		{"far future", signWith(key, now.Add(MaxRequestClockSkew+time.Second)), "pi-1", now, ErrRequestFarFuture},
	} {
		err := check(c.p, c.dev, c.at)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrRequestRefused) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := VerifyRequest(good, RequestCheck{Kind: KindRequest, Device: "pi-1", Now: now}, DecodeRequest); !errors.Is(err, ErrRequestNoKey) {
		t.Errorf("no key: %v", err)
	}
	// The other way round: a request's signature is no desired state's.
	if _, _, err := VerifyDesiredState(bytes.Replace(good, []byte(`"alg"`), []byte(`"publicKey":"`+EncodeSigningKey(pub)+`","alg"`), 1), pub); err == nil {
		t.Error("a request's signature verifies as a desired state's")
	}
}
