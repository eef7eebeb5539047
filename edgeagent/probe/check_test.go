package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// closedPort returns a port of 127.0.0.1 nobody listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := port(t, ln.Addr().String())
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckHTTP(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") != "yes" && r.URL.Query().Get("h") == "1" {
			http.Error(w, "no header", http.StatusBadRequest)
			return
		}
		if r.Host != "" && r.URL.Query().Get("host") != "" && r.Host != r.URL.Query().Get("host") {
			http.Error(w, "wrong host "+r.Host, http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/bad", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.invalid/", http.StatusFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(mux)
	t.Cleanup(tlsSrv.Close)
	p, tp := port(t, srv.Listener.Addr().String()), port(t, tlsSrv.Listener.Addr().String())
	ports := []schema.ContainerPort{{Name: "http", ContainerPort: int32(p)}}
	c := newChecker(nil)

	for _, tc := range []struct {
		name    string
		get     schema.HTTPGetAction
		timeout time.Duration
		ok      bool
		msg     string
	}{
		{"ok", schema.HTTPGetAction{Path: "/ok", Port: schema.PortRef(strconv.Itoa(p))}, time.Second, true,
			"http GET http://127.0.0.1:" + strconv.Itoa(p) + "/ok: status 200"},
		{"named port", schema.HTTPGetAction{Path: "/ok", Port: "http"}, time.Second, true, "status 200"},
		{"headers", schema.HTTPGetAction{Path: "/ok?h=1&host=probe.local", Port: "http",
			HTTPHeaders: []schema.HTTPHeader{{Name: "X-Probe", Value: "yes"}, {Name: "Host", Value: "probe.local"}}}, time.Second, true, "status 200"},
		{"missing header", schema.HTTPGetAction{Path: "/ok?h=1", Port: "http"}, time.Second, false, "status 400"},
		{"503", schema.HTTPGetAction{Path: "/bad", Port: "http"}, time.Second, false,
			"http GET http://127.0.0.1:" + strconv.Itoa(p) + "/bad: status 503"},
		{"same-host redirect followed", schema.HTTPGetAction{Path: "/here", Port: "http"}, time.Second, true, "status 200"},
		{"redirect elsewhere is success", schema.HTTPGetAction{Path: "/away", Port: "http"}, time.Second, true, "status 302"},
		{"https unverified", schema.HTTPGetAction{Path: "/ok", Port: schema.PortRef(strconv.Itoa(tp)), Scheme: "HTTPS"}, time.Second, true,
			"http GET https://127.0.0.1:" + strconv.Itoa(tp) + "/ok: status 200"},
		{"refused", schema.HTTPGetAction{Port: schema.PortRef(strconv.Itoa(closedPort(t)))}, time.Second, false, "connection refused"},
		{"timeout", schema.HTTPGetAction{Path: "/hang", Port: "http"}, 50 * time.Millisecond, false, "/hang: timed out after 50ms"},
		{"unknown named port", schema.HTTPGetAction{Port: "metrics"}, time.Second, false, `port "metrics" names none of the container's ports`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := c.check(context.Background(), "c1", &schema.Probe{HTTPGet: &tc.get}, ports, tc.timeout)
			if ok != tc.ok || !strings.Contains(msg, tc.msg) {
				t.Errorf("check = %v, %q; want %v, containing %q", ok, msg, tc.ok, tc.msg)
			}
			if strings.Contains(msg, "yes") {
				t.Errorf("message carries a header value: %q", msg)
			}
		})
	}
}

func TestCheckTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	p := port(t, ln.Addr().String())
	c := newChecker(nil)
	ports := []schema.ContainerPort{{Name: "mqtt", ContainerPort: int32(p)}}
	ok, msg := c.check(context.Background(), "c1", &schema.Probe{TCPSocket: &schema.TCPSocketAction{Port: "mqtt"}}, ports, time.Second)
	if !ok || msg != "tcp 127.0.0.1:"+strconv.Itoa(p)+": connected" {
		t.Errorf("listening port: %v %q", ok, msg)
	}
	closed := closedPort(t)
	ok, msg = c.check(context.Background(), "c1", &schema.Probe{TCPSocket: &schema.TCPSocketAction{Port: schema.PortRef(strconv.Itoa(closed))}}, nil, time.Second)
	if ok || msg != "tcp 127.0.0.1:"+strconv.Itoa(closed)+": connect: connection refused" {
		t.Errorf("closed port: %v %q", ok, msg)
	}
	ok, msg = c.check(context.Background(), "c1", &schema.Probe{TCPSocket: &schema.TCPSocketAction{Port: "80", Host: "::1"}}, nil, time.Second)
	if !strings.HasPrefix(msg, "tcp [::1]:80: ") {
		t.Errorf("ipv6 host formatted as %q", msg)
	}
}

func TestCheckExecWithoutExecer(t *testing.T) {
	ok, msg := newChecker(nil).check(context.Background(), "c1", execProbe("cat"), nil, time.Second)
	if ok || !strings.Contains(msg, "exec is not available") {
		t.Errorf("check = %v %q", ok, msg)
	}
}
