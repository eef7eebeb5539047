package storetest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/etcdtest"
)

// holdProxy forwards TCP between the store and one etcd member; Hold
// stops forwarding one direction (what arrives waits, in order, on the
// open connection), Release lets it through.
type holdProxy struct {
	addr   string
	mu     sync.Mutex
	cond   *sync.Cond
	held   map[bool]bool // up (client → etcd): true
	passed map[bool]int  // chunks forwarded each way
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{addr: ln.Addr().String(), held: map[bool]bool{}, passed: map[bool]int{}}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() { ln.Close(); p.Release(true); p.Release(false) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(c, u, true)
			go p.pipe(u, c, false)
		}
	}()
	return p
}

func (p *holdProxy) pipe(from, to net.Conn, up bool) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held[up] {
				p.cond.Wait()
			}
			p.passed[up]++
			p.mu.Unlock()
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

func (p *holdProxy) Hold(up bool) {
	p.mu.Lock()
	p.held[up] = true
	p.mu.Unlock()
}

func (p *holdProxy) Release(up bool) {
	p.mu.Lock()
	p.held[up] = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// TestEtcdLostAnswer: a commit whose request or answer is held on the wire
// past the store's request timeout is settled, not guessed: an applied
// commit is acknowledged once, a held one is fenced and run again, and
// either way the object exists once and its event is delivered once.
func TestEtcdLostAnswer(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	direct := c.Client(t)
	for _, tc := range []struct {
		name string
		up   bool // hold the request (true) or the answer (false)
	}{{"AnswerHeld", false}, {"RequestHeld", true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, target, _ := strings.Cut(c.Members[0].ClientURL, "://")
			p := startHoldProxy(t, target)
			prefix := "/lost/" + tc.name + "/"
			s, err := store.Open(store.Options{Dir: filepath.Join(t.TempDir(), "store"), GCInterval: -1,
				Etcd: &store.EtcdOptions{Endpoints: []string{"http://" + p.addr}, Prefix: prefix, RequestTimeout: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			first, err := s.Create(ctx, Device("before"), false)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := s.Watch(ctx, schema.KindDevice, rv(t, first))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var attempts int
			var committed uint64
			start := time.Now()
			go func() {
				var err error
				committed, err = s.Write(ctx, func(tx *store.Txn) error {
					_, err := tx.MutateObject(schema.KindDevice, "before", func(o schema.Object) error {
						o.GetMetadata().Labels["n"] = "1"
						return nil
					})
					if attempts++; attempts == 1 {
						p.Hold(tc.up) // the reads are done: hold the commit
					}
					return err
				})
				done <- err
			}()
			// Let the commit's request timeout pass, then open the wire.
			deadline := time.Now().Add(1500 * time.Millisecond)
			for time.Now().Before(deadline) {
				select {
				case err := <-done:
					t.Fatalf("the write finished while the wire was held: %v", err)
				case <-time.After(50 * time.Millisecond):
				}
			}
			p.Release(tc.up)
			if err := <-done; err != nil {
				t.Fatalf("write across a held %s: %v", map[bool]string{true: "request", false: "answer"}[tc.up], err)
			}
			t.Logf("write acknowledged after %v, in %d attempt(s)", time.Since(start).Round(time.Millisecond), attempts)
			if committed != rv(t, first)+1 {
				t.Fatalf("committed as revision %d, want %d: one commit", committed, rv(t, first)+1)
			}
			got, err := s.Get(ctx, schema.KindDevice, "before")
			if err != nil || got.GetMetadata().Labels["n"] != "1" || rv(t, got) != committed {
				t.Fatalf("device after the write: %+v, %v", got, err)
			}
			after, err := s.Create(ctx, Device("after"), false)
			if err != nil {
				t.Fatal(err)
			}
			var evs []string
			for len(evs) < 2 {
				select {
				case ev := <-ch:
					evs = append(evs, fmt.Sprintf("%s %s@%d", ev.Type, ev.Name, ev.Revision))
				case <-ctx.Done():
					t.Fatalf("events: %v", evs)
				}
			}
			want := []string{fmt.Sprintf("MODIFIED before@%d", committed), fmt.Sprintf("ADDED after@%d", committed+1)}
			if evs[0] != want[0] || evs[1] != want[1] || rv(t, after) != committed+1 {
				t.Fatalf("events %v, want %v", evs, want)
			}
			// A fresh store on the same prefix (etcd's view) agrees.
			resp, err := direct.Get(ctx, prefix+"v1/meta/revision")
			if err != nil || len(resp.Kvs) != 1 || binary.BigEndian.Uint64(resp.Kvs[0].Value) != committed+1 {
				t.Fatalf("etcd's store revision: %v, %v; want %d", resp, err, committed+1)
			}
		})
	}
}
