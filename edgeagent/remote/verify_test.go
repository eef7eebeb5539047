package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// recorder is a runtime that records every call the remote server makes
// of it (List, ExecStream, Stats, DiskSpace) before handing it on.
type recorder struct {
	runtime.Runtime
	mu    sync.Mutex
	calls []string
}

func (r *recorder) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *recorder) List(ctx context.Context) ([]runtime.Container, error) {
	r.record("List")
	return r.Runtime.List(ctx)
}

func (r *recorder) ExecStream(ctx context.Context, id string, o runtime.ExecStreamOptions) (int, error) {
	r.record("ExecStream " + strings.Join(o.Cmd, " "))
	return r.Runtime.ExecStream(ctx, id, o)
}

func (r *recorder) Stats(ctx context.Context, id string) (runtime.ContainerStats, error) {
	r.record("Stats")
	return r.Runtime.Stats(ctx, id)
}

func (r *recorder) DiskSpace(ctx context.Context) (runtime.DiskSpace, error) {
	r.record("DiskSpace")
	return r.Runtime.DiskSpace(ctx)
}

// withRecorder makes the env's runtime a recorder; it returns it.
func withRecorder(rec **recorder) envOpt {
	return func(o *Options) {
		*rec = &recorder{Runtime: o.Runtime}
		o.Runtime = *rec
	}
}

// otherKey is a key the device has not pinned.
var otherKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))

// resign replaces the signature of a signed payload by key's over its
// canonical bytes as they are now.
func resign(t testing.TB, canonical []byte, key ed25519.PrivateKey) []byte {
	t.Helper()
	b, err := schema.SignRequest(canonical, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// canonicalOf marshals r with its RequestAuth as given, unsigned.
func canonicalOf(t testing.TB, r schema.Request) []byte {
	t.Helper()
	r.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest}
	if r.Device == "" {
		r.Device = "pi-1"
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func execReq(id, marker string) schema.Request {
	return schema.Request{ID: id, Op: schema.OpExec, Exec: &schema.ExecOptions{Pod: "web", Command: []string{"touch", marker}}}
}

// TestRefusedRequestsRunNothing: a request that is unsigned, mutated after
// signing, signed by another key, with no key pinned, expired, expiring
// too far ahead, replayed, for another device, signed before the agent
// started, or with a malformed signature member runs nothing (the runtime
// is never called), and is answered with a Done of code Unauthenticated
// that says why; a refused follow-up is not answered. A genuine request
// runs, once.
func TestRefusedRequestsRunNothing(t *testing.T) {
	var rec *recorder
	e := newEnv(t, withRecorder(&rec))
	e.container("web", "app")
	now := e.srv.o.Now()
	auth := func(at time.Time) schema.RequestAuth {
		a, err := schema.NewRequestAuth(at)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	genuineID := newID()
	genuine := sign(t, execReq(genuineID, "/tmp/genuine"))
	// mutate signs an exec of its own ID and changes old to new in it.
	mutate := func(old, new string) []byte {
		return bytes.Replace(sign(t, execReq(newID(), "/tmp/genuine")), []byte(old), []byte(new), 1)
	}
	mutated := mutate("/tmp/genuine", "/tmp/pwned!!")
	badSigMember := mutate(`"alg":"ed25519"`, `"alg":"ed25519","x":1`)
	truncatedSig := mutate(`"sig":"`, `"sig":"AAAA`)
	signed := func(r schema.Request, a schema.RequestAuth, key ed25519.PrivateKey) []byte {
		r.RequestAuth = a
		return resign(t, canonicalOf(t, r), key)
	}
	cases := []struct {
		name    string
		payload []byte
		want    string // in the refusal
	}{
		{"unsigned", canonicalOf(t, schema.Request{ID: newID(), Op: schema.OpExec, RequestAuth: auth(now),
			Exec: &schema.ExecOptions{Pod: "web", Command: []string{"touch", "/tmp/x"}}}), "not signed"},
		{"mutated", mutated, "does not verify"},
		{"other key", signed(execReq(newID(), "/tmp/x"), auth(now), otherKey), "not by the pinned hub key"},
		{"expired", signed(execReq(newID(), "/tmp/x"), auth(now.Add(-schema.RequestExpiry-schema.MaxRequestClockSkew-time.Second)), hubKey), "expired"},
		{"far future", signed(execReq(newID(), "/tmp/x"), auth(now.Add(schema.MaxRequestClockSkew+time.Second)), hubKey), "too far ahead"},
		{"before start", signed(execReq(newID(), "/tmp/x"), auth(now.Add(-schema.MaxRequestClockSkew-time.Second)), hubKey), "before this agent started"},
		{"other device", sign(t, schema.Request{ID: newID(), Device: "pi-2", Op: schema.OpExec,
			Exec: &schema.ExecOptions{Pod: "web", Command: []string{"touch", "/tmp/x"}}}), "another device"},
		{"no nonce", signed(execReq(newID(), "/tmp/x"), schema.RequestAuth{Expires: now.Add(time.Minute)}, hubKey), "nonce"},
		{"unknown member in signature", badSigMember, "signature member"},
		{"sig of another length", truncatedSig, "not a base64 ed25519 signature"},
	}
	for _, c := range cases {
		var id struct{ ID string }
		_ = json.Unmarshal(c.payload, &id)
		e.srv.Handle(c.payload)
		rs := e.pub.done(id.ID)
		if len(rs) != 1 || rs[0].Code != schema.CodeUnauthenticated || !strings.Contains(rs[0].Error, c.want) {
			t.Errorf("%s: responses %s, want one Done %s saying %q", c.name, dump(rs), schema.CodeUnauthenticated, c.want)
		}
	}
	if calls := rec.recorded(); len(calls) != 0 {
		t.Fatalf("refused requests called the runtime: %q", calls)
	}

	// The genuine one runs; its replay does not, and is refused.
	e.srv.Handle(genuine)
	rs := e.pub.done(genuineID)
	if d := rs[len(rs)-1]; d.Code != "" || d.ExitCode == nil {
		t.Fatalf("genuine exec: %s", dump(rs))
	}
	e.srv.Handle(genuine)
	rs = e.pub.await("the replay's refusal", genuineID, func(rs []*schema.Response) bool {
		return len(rs) > 0 && rs[len(rs)-1].Code == schema.CodeUnauthenticated
	})
	if !strings.Contains(rs[len(rs)-1].Error, "replayed") {
		t.Errorf("replay refusal %q does not say replayed", rs[len(rs)-1].Error)
	}
	var execs []string
	for _, c := range rec.recorded() {
		if strings.HasPrefix(c, "ExecStream") {
			execs = append(execs, c)
		}
	}
	if len(execs) != 1 || execs[0] != "ExecStream touch /tmp/genuine" {
		t.Fatalf("execs = %q, want the genuine one once", execs)
	}
	if st := e.srv.Stats(); st.Unauthenticated != int64(len(cases))+1 || st.Started != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRefusedFollowUps: a follow-up (stdin, cancel) of a live exec that
// is unsigned, or a genuine one replayed, changes nothing and gets no
// answer; the signed ones steer the exec.
func TestRefusedFollowUps(t *testing.T) {
	e := newEnv(t)
	e.container("web", "app")
	e.ackAll()
	e.rt.SetExecStreamHandler(func(ctx context.Context, id string, o runtime.ExecStreamOptions) (int, error) {
		o.Started()
		var b bytes.Buffer
		buf := make([]byte, 64)
		for {
			n, err := o.Stdin.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		_, _ = o.Stdout.Write(b.Bytes())
		return 0, nil
	})
	id := newID()
	e.send(schema.Request{ID: id, Op: schema.OpExec, Exec: &schema.ExecOptions{Pod: "web", Command: []string{"cat"}, Stdin: true}})
	e.pub.await("started", id, func(rs []*schema.Response) bool { return len(rs) >= 1 })
	unsigned := canonicalOf(t, schema.Request{ID: id, Op: schema.OpStdin, Data: []byte("EVIL "), Seq: 1})
	e.srv.Handle(unsigned)
	e.srv.Handle(canonicalOf(t, schema.Request{ID: id, Op: schema.OpCancel}))
	in := sign(t, schema.Request{ID: id, Op: schema.OpStdin, Data: []byte("good "), Seq: 1})
	e.srv.Handle(in)
	e.srv.Handle(in) // replayed
	e.send(schema.Request{ID: id, Op: schema.OpStdin, Data: []byte("bye"), Seq: 2, EOF: true})
	rs := e.pub.done(id)
	var out strings.Builder
	for _, r := range rs {
		out.Write(r.Data)
		if r.Code == schema.CodeUnauthenticated {
			t.Fatalf("a refused follow-up was answered: %s", dump(rs))
		}
	}
	if out.String() != "good bye" {
		t.Fatalf("exec read %q, want %q", out.String(), "good bye")
	}
	if st := e.srv.Stats(); st.Unauthenticated != 3 {
		t.Fatalf("stats %+v: want 3 refused", st)
	}
}

// TestRefusedBadInput: huge or malformed requests are refused with a
// clear answer and run nothing; no key pinned refuses everything.
func TestRefusedBadInput(t *testing.T) {
	var rec *recorder
	e := newEnv(t, withRecorder(&rec))
	e.container("web", "app")
	huge := newID()
	e.srv.Handle(sign(t, schema.Request{ID: huge, Op: schema.OpExec, Exec: &schema.ExecOptions{Pod: "web",
		Command: []string{"sh", "-c", strings.Repeat("x", 70<<10)}}}))
	if rs := e.pub.done(huge); rs[0].Code != schema.CodeBadRequest || !strings.Contains(rs[0].Error, "command") {
		t.Errorf("huge command: %s", dump(rs))
	}
	bigData := newID()
	e.srv.Handle(sign(t, schema.Request{ID: bigData, Op: schema.OpExec, Data: make([]byte, schema.MaxChunkBytes+1),
		Exec: &schema.ExecOptions{Pod: "web", Command: []string{"true"}}}))
	if rs := e.pub.done(bigData); rs[0].Code != schema.CodeBadRequest || !strings.Contains(rs[0].Error, "data") {
		t.Errorf("huge data: %s", dump(rs))
	}
	oversize := newID()
	pad := sign(t, schema.Request{ID: oversize, Op: schema.OpTop})
	e.srv.Handle(append(pad[:len(pad)-1], []byte(`,"pad":"`+strings.Repeat("p", maxRequestPayload)+`"}`)...))
	if rs := e.pub.done(oversize); rs[0].Code != schema.CodeUnauthenticated || !strings.Contains(rs[0].Error, "at most") {
		t.Errorf("oversize payload: %s", dump(rs))
	}
	for _, p := range []string{"", "null", "{}", `{"signature":{}}`, `,"signature":{`, `{"id":"` + newID() + `","op":"exec","signature":{"alg":"ed25519","keyId":"","sig":""}}`} {
		e.srv.Handle([]byte(p))
	}
	if calls := rec.recorded(); len(calls) != 0 {
		t.Fatalf("bad input called the runtime: %q", calls)
	}

	// No key pinned: nothing is acted on.
	var rec2 *recorder
	e2 := newEnv(t, withRecorder(&rec2), func(o *Options) { o.Key = func() ed25519.PublicKey { return nil } })
	e2.container("web", "app")
	id := newID()
	e2.send(schema.Request{ID: id, Op: schema.OpTop})
	if rs := e2.pub.done(id); rs[0].Code != schema.CodeUnauthenticated || !strings.Contains(rs[0].Error, "no hub signing key is pinned") {
		t.Errorf("no key pinned: %s", dump(rs))
	}
	if calls := rec2.recorded(); len(calls) != 0 {
		t.Fatalf("with no key pinned the runtime was called: %q", calls)
	}
}

// TestVerifierMemoryBounded: nonces are forgotten once past their time,
// and a full Verifier refuses rather than letting a request through
// unchecked.
func TestVerifierMemoryBounded(t *testing.T) {
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	v := NewVerifier("pi-1", hubPub, now)
	for range 100 {
		if _, err := Verify(v, schema.KindRequest, signAt(t, schema.Request{ID: newID(), Op: schema.OpTop}, clock), schema.DecodeRequest); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.remembered(); n != 100 {
		t.Fatalf("%d nonces remembered, want 100", n)
	}
	clock = clock.Add(schema.RequestExpiry + schema.MaxRequestClockSkew + 2*time.Minute)
	if _, err := Verify(v, schema.KindRequest, signAt(t, schema.Request{ID: newID(), Op: schema.OpTop}, clock), schema.DecodeRequest); err != nil {
		t.Fatal(err)
	}
	if n := v.remembered(); n != 1 {
		t.Fatalf("%d nonces remembered after the window, want 1", n)
	}
	v.mu.Lock()
	for i := range MaxRememberedNonces {
		var n [schema.RequestNonceBytes]byte
		n[0], n[1], n[2] = byte(i), byte(i>>8), 0xff
		v.seen[n] = clock.Add(time.Hour)
	}
	v.mu.Unlock()
	_, err := Verify(v, schema.KindRequest, signAt(t, schema.Request{ID: newID(), Op: schema.OpTop}, clock), schema.DecodeRequest)
	if !errors.Is(err, errNoncesFull) {
		t.Fatalf("full verifier: %v, want errNoncesFull", err)
	}
}
