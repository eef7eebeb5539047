package schema

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func testJoin(t *testing.T) JoinInfo {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return JoinInfo{
		Brokers: []string{"ssl://10.0.0.5:8883"}, CAHash: "sha256:" + strings.Repeat("ab", 32),
		SigningKey: EncodeSigningKey(pub), Device: "pi-1", Token: "secret-device-token",
	}
}

func TestJoinRoundTrip(t *testing.T) {
	j := testJoin(t)
	s, err := EncodeJoin(j)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, JoinPrefix) || strings.ContainsAny(s, " \n=+/") {
		t.Fatalf("join string %q: want %s and base64url, one word", s, JoinPrefix)
	}
	got, err := ParseJoin("  " + s + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.Device != j.Device || got.Token != j.Token || got.SigningKey != j.SigningKey || got.CAHash != j.CAHash || len(got.Brokers) != 1 || got.Brokers[0] != j.Brokers[0] {
		t.Fatalf("round trip: %+v, want %+v", got, j)
	}
	bt := j
	bt.Token, bt.Device, bt.BootstrapToken = "", "", "abc123."+strings.Repeat("x", 32)
	if s, err = EncodeJoin(bt); err != nil {
		t.Fatal(err)
	}
	if got, err = ParseJoin(s); err != nil || got.BootstrapToken != bt.BootstrapToken {
		t.Fatalf("bootstrap join string: %+v, %v", got, err)
	}
}

// TestParseJoinErrors: every way a join string can be wrong gives an
// error that names what is wrong, and none repeats the token.
func TestParseJoinErrors(t *testing.T) {
	enc := func(json string) string { return JoinPrefix + base64.RawURLEncoding.EncodeToString([]byte(json)) }
	with := func(f func(*JoinInfo)) string {
		j := testJoin(t)
		f(&j)
		b, err := jsonMarshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return enc(string(b))
	}
	tests := []struct{ name, in, want string }{
		{"empty", "", "does not start with fleetjoin1:"},
		{"a token instead", "secret-device-token", "does not start with fleetjoin1:"},
		{"a later format", "fleetjoin2:e30", `format "fleetjoin2" is not one this agent knows`},
		{"not base64url", JoinPrefix + "%%%secret-device-token", "not base64url"},
		{"cut short", JoinPrefix + "eyJicm9r", "its JSON does not decode"},
		{"not an object", enc(`[1]`), "its JSON does not decode"},
		{"an unknown member", enc(`{"brokers":["tcp://h"],"signingKey":"x","evil":1}`), `unknown field "evil"`},
		{"trailing data", enc(`{} {}`), "data after its JSON object"},
		{"no broker", with(func(j *JoinInfo) { j.Brokers = nil }), "brokers: none"},
		{"bad broker", with(func(j *JoinInfo) { j.Brokers = []string{"http://hub"} }), "brokers[0]: broker \"http://hub\": scheme must be"},
		{"broker with credentials", with(func(j *JoinInfo) { j.Brokers = []string{"tcp://u:secret-device-token@hub"} }), "brokers[0]: \"tcp://u:xxxxx@hub:1883\" carries credentials"},
		{"bad CA hash", with(func(j *JoinInfo) { j.CAHash = "sha256:zz" }), "caHash: CA hash"},
		{"no signing key", with(func(j *JoinInfo) { j.SigningKey = "" }), "signingKey: missing"},
		{"a short signing key", with(func(j *JoinInfo) { j.SigningKey = "AAAA" }), "signingKey: signing key: 3 bytes"},
		{"no token", with(func(j *JoinInfo) { j.Token = "" }), "token: missing"},
		{"two tokens", with(func(j *JoinInfo) { j.BootstrapToken = "abc123." + strings.Repeat("x", 32) }), "token: and bootstrapToken both set"},
		{"token without device", with(func(j *JoinInfo) { j.Device = "" }), "device: missing"},
		{"bad device", with(func(j *JoinInfo) { j.Device = "Pi_1" }), "device: "},
		{"bad bootstrap token", with(func(j *JoinInfo) { j.Token, j.BootstrapToken = "", "secret-device-token" }), "bootstrapToken: not a bootstrap token"},
		{"too long", JoinPrefix + strings.Repeat("A", MaxJoinString), "at most 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJoin(tt.in)
			if err == nil {
				t.Fatalf("ParseJoin accepted %q", tt.in)
			}
			if !errors.Is(err, ErrJoin) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q: want ErrJoin and %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret-device-token") {
				t.Fatalf("the error repeats the token: %q", err)
			}
		})
	}
}

func FuzzParseJoin(f *testing.F) {
	f.Add("fleetjoin1:e30")
	f.Add(JoinPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"brokers":["tcp://h"],"signingKey":"`+strings.Repeat("A", 43)+`=","device":"d","token":"t"}`)))
	f.Fuzz(func(t *testing.T, s string) {
		j, err := ParseJoin(s)
		if err != nil {
			return
		}
		// What parses re-encodes, and parses the same.
		again, err := EncodeJoin(j)
		if err != nil {
			t.Fatalf("a parsed join string does not encode: %v", err)
		}
		if _, err := ParseJoin(again); err != nil {
			t.Fatalf("re-encoded join string does not parse: %v", err)
		}
	})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
