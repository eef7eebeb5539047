package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// fakePub is an in-memory publisher standing in for the session and the
// hub: it keeps every response in order, can be taken offline, and
// acknowledges data responses when autoAck is on.
type fakePub struct {
	t *testing.T

	mu       sync.Mutex
	resps    []*schema.Response
	down     bool
	attempts int
	autoAck  func(*schema.Response) // called after a data response was taken
	wake     chan struct{}
}

func newFakePub(t *testing.T) *fakePub { return &fakePub{t: t, wake: make(chan struct{}, 1)} }

func (p *fakePub) Publish(ctx context.Context, topic string, retained bool, payload []byte) error {
	if retained || topic != "fleet/v1/devices/pi-1/responses" {
		p.t.Errorf("publish to %s retained=%v", topic, retained)
	}
	r, err := schema.DecodeResponse(payload)
	if err != nil {
		p.t.Errorf("bad response: %v", err)
		return nil
	}
	p.mu.Lock()
	p.attempts++
	if p.down {
		p.mu.Unlock()
		return errors.New("mqtt: not connected")
	}
	p.resps = append(p.resps, r)
	ack := p.autoAck
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if ack != nil && len(r.Data) > 0 {
		ack(r)
	}
	return nil
}

func (p *fakePub) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// of returns the responses to request id.
func (p *fakePub) of(id string) []*schema.Response {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*schema.Response
	for _, r := range p.resps {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// await polls until cond holds for id's responses, failing after 10 s.
func (p *fakePub) await(what, id string, cond func([]*schema.Response) bool) []*schema.Response {
	p.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		rs := p.of(id)
		if cond(rs) {
			return rs
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			p.t.Fatalf("%s: timed out; responses: %s", what, dump(rs))
		}
	}
}

// done waits for id's Done and returns every response.
func (p *fakePub) done(id string) []*schema.Response {
	p.t.Helper()
	return p.await("done "+id, id, func(rs []*schema.Response) bool { return len(rs) > 0 && rs[len(rs)-1].Done })
}

func dump(rs []*schema.Response) string {
	var b strings.Builder
	for _, r := range rs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// text joins the data of rs and checks their Seqs count from 1 and that
// exactly the last is Done.
func text(t *testing.T, rs []*schema.Response) string {
	t.Helper()
	var b strings.Builder
	for i, r := range rs {
		if r.Seq != int64(i+1) {
			t.Fatalf("response %d has seq %d:\n%s", i, r.Seq, dump(rs))
		}
		if r.Done != (i == len(rs)-1) {
			t.Fatalf("done on response %d of %d:\n%s", i+1, len(rs), dump(rs))
		}
		if len(r.Data) > schema.MaxChunkBytes {
			t.Fatalf("chunk of %d bytes", len(r.Data))
		}
		b.Write(r.Data)
	}
	return b.String()
}

func newID() string {
	var b [schema.RequestIDBytes]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// env is a Server on a Fake runtime with a state dir of logs.
type env struct {
	t   *testing.T
	pub *fakePub
	rt  *runtime.Fake
	srv *Server
	dir string
	now func() time.Time
}

// hubKey is the hub's signing key of the tests: the Servers pin its
// public half.
var hubKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{42}, ed25519.SeedSize))

func hubPub() ed25519.PublicKey { return hubKey.Public().(ed25519.PublicKey) }

// sign makes the payload the hub would send for r.
func sign(t testing.TB, r schema.Request) []byte {
	t.Helper()
	return signAt(t, r, time.Now())
}

// signAt signs r at now.
func signAt(t testing.TB, r schema.Request, now time.Time) []byte {
	t.Helper()
	r.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindRequest}
	if r.Device == "" {
		r.Device = "pi-1"
	}
	b, err := schema.EncodeSignedRequest(&r, now, func(c []byte) ([]byte, error) { return schema.SignRequest(c, hubKey) })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type envOpt func(*Options)

func newEnv(t *testing.T, mods ...envOpt) *env {
	t.Helper()
	e := &env{t: t, pub: newFakePub(t), rt: runtime.NewFake(runtime.FakeOptions{}), dir: t.TempDir()}
	o := Options{
		Device: "pi-1", Publisher: e.pub, Runtime: e.rt, Key: hubPub,
		LogPath: func(pod, c string) string { return filepath.Join(e.dir, "logs", pod, c+".log") },
		Node: func(context.Context) schema.NodeMetrics {
			return schema.NodeMetrics{Load1: 0.5, CPUs: 4}
		},
		FollowInterval: 20 * time.Millisecond,
		IndexInterval:  -1,
		RetryInitial:   5 * time.Millisecond,
		RetryMax:       20 * time.Millisecond,
	}
	for _, m := range mods {
		m(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	// Run has set its context once a request is taken.
	deadline := time.Now().Add(5 * time.Second)
	for srv.stopping() {
		if time.Now().After(deadline) {
			t.Fatal("server did not start")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	return e
}

// container creates and starts pod/name in the Fake.
func (e *env) container(pod, name string) string {
	e.t.Helper()
	ctx := context.Background()
	id := pod + "-" + name
	e.rt.AddImage("app:1")
	if err := e.rt.Create(ctx, runtime.ContainerSpec{ID: id, Pod: pod, Name: name, Image: "app:1"}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rt.Start(ctx, id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) logPath(pod, c string) string { return filepath.Join(e.dir, "logs", pod, c+".log") }

func (e *env) writeLog(path, s string, appendTo bool) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		e.t.Fatal(err)
	}
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
}

// send hands a request, signed as the hub does, to the server as the
// session would.
func (e *env) send(r schema.Request) {
	e.t.Helper()
	e.srv.Handle(signAt(e.t, r, e.srv.o.Now())) // the device's clock
}

func (e *env) logs(id string, lo schema.LogOptions) {
	e.send(schema.Request{ID: id, Op: schema.OpLogs, Logs: &lo})
}

func (e *env) ack(id string, seq int64) {
	e.send(schema.Request{ID: id, Op: schema.OpAck, Ack: seq})
}

// ackAll makes the fake hub acknowledge every data response at once.
func (e *env) ackAll() {
	e.pub.mu.Lock()
	e.pub.autoAck = func(r *schema.Response) { go e.ack(r.ID, r.Seq) }
	e.pub.mu.Unlock()
}

func ptr[T any](v T) *T { return &v }
