package trust_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/fleetmq/fleet/edgeagent/trust"
	"github.com/fleetmq/fleet/schema"
)

// FuzzCheck: whatever a rogue makes of the hub's signed payloads, a
// payload that Check passes says exactly what the hub signed: its
// canonical bytes are one of the hub's, and it decodes to the same state.
// The keys are fixed (seeded) so that the corpus stays meaningful.
func FuzzCheck(f *testing.F) {
	hub := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	next := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize))
	rogue := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	endorsed := schema.EndorseSigningKey(hub, next.Public().(ed25519.PublicKey))
	canonicals := [][]byte{
		[]byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"pi-1","generation":1,"store":"s1","pods":[]}`),
		[]byte(`{"apiVersion":"fleet/v1","kind":"DesiredState","device":"pi-1","generation":2,"store":"s1","pods":[{"name":"web","spec":{"containers":[{"name":"app","image":"nginx:1"}]}}]}`),
	}
	var genuine [][]byte
	for _, c := range canonicals {
		for _, s := range []struct {
			k ed25519.PrivateKey
			e *schema.KeyEndorsement
		}{{hub, nil}, {next, &endorsed}} {
			b, err := schema.SignDesiredState(c, s.k, s.e)
			if err != nil {
				f.Fatal(err)
			}
			genuine = append(genuine, b)
			f.Add(b)
		}
		if b, err := schema.SignDesiredState(c, rogue, nil); err == nil {
			f.Add(b)
		}
	}
	f.Add(bytes.Replace(genuine[0], []byte(`"generation":1`), []byte(`"generation":9`), 1))
	f.Add(append(append([]byte{}, genuine[1]...), ' '))
	decode := func(b []byte) []byte {
		var ds schema.DesiredState
		if json.Unmarshal(b, &ds) != nil {
			return nil
		}
		ds.Signature = nil
		out, _ := json.Marshal(ds)
		return out
	}
	// Check pins nothing: one pin serves every input.
	dir := f.TempDir()
	if err := trust.Save(dir, hub.Public().(ed25519.PublicKey)); err != nil {
		f.Fatal(err)
	}
	pin, err := trust.Load(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		v, err := pin.Check(payload)
		if err != nil {
			return
		}
		if !v.Signed {
			t.Fatalf("Check passed an unsigned payload with a key pinned: %q", payload)
		}
		canonical, _, err := schema.SplitSignedDesiredState(payload)
		if err != nil {
			t.Fatalf("Check passed a payload that does not split: %v", err)
		}
		for i, c := range canonicals {
			if bytes.Equal(canonical, c) {
				if got, want := decode(payload), decode(genuine[2*i]); got != nil && !bytes.Equal(got, want) {
					t.Fatalf("a payload with the hub's canonical bytes decodes to another state:\n%s\nwant\n%s", got, want)
				}
				return
			}
		}
		t.Fatalf("Check passed canonical bytes the hub never signed: %q", canonical)
	})
}
