package enrollment

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// FuzzEnrollAnswer: whatever a bootstrap client sends as its enrollment
// request, the hub's answer (decoding, checks, the store's transaction)
// never panics; it issues a device token only to a request carrying the
// real bootstrap token, for a valid device name that is not an existing
// device's, and the token works; a refusal gives a known reason and never
// echoes the bootstrap token it was sent. "$TOKEN" in a payload stands
// for the real token, so that the fuzzer reaches the paths behind the
// token check.
func FuzzEnrollAnswer(f *testing.F) {
	const secret = "0123456789abcdef0123456789abcdef"
	for _, s := range []string{
		`{"apiVersion":"fleet/v1","kind":"EnrollRequest","token":"$TOKEN","secret":"` + secret + `","device":"pi-new"}`,
		`{"kind":"EnrollRequest","token":"$TOKEN","secret":"` + secret + `","device":"taken"}`,
		`{"token":"$TOKEN","secret":"short","device":"pi-x"}`,
		`{"token":"$TOKEN","secret":"` + secret + `","device":"Pi_X"}`,
		`{"token":"$TOKEN","secret":"` + secret + `","device":"pi-k","publicKey":"not-a-key"}`,
		`{"token":"abcdef.0123456789abcdef0123456789abcdef","secret":"` + secret + `","device":"pi-y"}`,
		`{"kind":"Device","token":"$TOKEN"}`,
		`{"token":"$TOKEN"`, `null`, `[]`, `{"token":1}`,
	} {
		f.Add("req_0123456789abcdef", []byte(s))
	}
	st, err := store.Open(store.Options{Dir: f.TempDir(), GCInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	token, _, err := st.CreateBootstrapToken(f.Context(), store.BootstrapTokenSpec{Labels: map[string]string{"site": "lab"}})
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := st.Apply(f.Context(), &schema.Device{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice}, Metadata: schema.ObjectMeta{Name: "taken"}}, false); err != nil {
		f.Fatal(err)
	}
	e := New(Options{Store: st, Topics: schema.Topics{}, Logger: slog.New(slog.DiscardHandler)})
	reasons := []string{schema.EnrollUnauthorized, schema.EnrollExpired, schema.EnrollUsedUp, schema.EnrollNameTaken,
		schema.EnrollInvalid, schema.EnrollRequestReused, schema.EnrollInternalError}
	f.Fuzz(func(t *testing.T, requestID string, payload []byte) {
		if schema.ValidateRequestID(requestID) != nil {
			requestID = "req_0123456789abcdef" // ParseEnroll checked it
		}
		payload = []byte(strings.ReplaceAll(string(payload), "$TOKEN", token))
		resp := e.answer(t.Context(), requestID, payload)
		// The answer may quote the client's own fields back (a kind, a
		// device name), but never the token from the token field.
		var req schema.EnrollRequest
		onlyInTokenField := json.Unmarshal(payload, &req) == nil && req.Token == token && strings.Count(string(payload), token) == 1
		if onlyInTokenField && (strings.Contains(resp.Message, token) || strings.Contains(resp.Device, token)) {
			t.Fatalf("the answer echoes the bootstrap token: %+v", resp)
		}
		if resp.Token == "" {
			if !slices.Contains(reasons, resp.Reason) {
				t.Fatalf("refusal with reason %q", resp.Reason)
			}
			return
		}
		if resp.Reason != "" {
			t.Fatalf("a token with reason %q", resp.Reason)
		}
		if !strings.Contains(string(payload), token) {
			t.Fatalf("a token for a request without the bootstrap token: %s", payload)
		}
		if err := schema.ValidateName(resp.Device); err != nil || resp.Device == "taken" {
			t.Fatalf("a token for device %q: %v", resp.Device, err)
		}
		if resp.Token == token {
			t.Fatal("the device token is the bootstrap token")
		}
		if !st.VerifyToken(resp.Device, resp.Token) {
			t.Fatalf("the token issued to %q does not authenticate it", resp.Device)
		}
	})
}
