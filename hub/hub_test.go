package hub

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/hub/adminconf"
)

// readAdminConfig reads admin.conf as the fleet CLI does.
func readAdminConfig(path string) (adminconf.Config, error) {
	c, err := client.ReadAdminConfig(path)
	return adminconf.Config(c), err
}

func TestURLFor(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{":8080", "http://127.0.0.1:8080"},
		{"0.0.0.0:9", "http://127.0.0.1:9"},
		{"[::]:9", "http://127.0.0.1:9"},
		{"[::1]:9", "http://[::1]:9"},
		{"hub.example:80", "http://hub.example:80"},
	}
	for _, tt := range tests {
		if got := URLFor(tt.addr); got != tt.want {
			t.Errorf("URLFor(%q) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

type running struct {
	info Info
	stop func() error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t *testing.T, dir string, logs *lockedBuffer) running {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan Info, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			DataDir: dir, HTTPAddr: "127.0.0.1:0", MQTTAddr: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Ready:  func(i Info) { ready <- i },
		})
	}()
	select {
	case i := <-ready:
		return running{info: i, stop: func() error { cancel(); return <-done }}
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("hub not ready within 30s")
	}
	return running{}
}

func get(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRunAdminConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	logs := &lockedBuffer{}
	h := start(t, dir, logs)
	conf, err := readAdminConfig(h.info.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if conf.Hub != h.info.URL || !strings.HasPrefix(conf.Hub, "http://127.0.0.1:") || strings.HasSuffix(conf.Hub, ":0") {
		t.Errorf("admin.conf hub %q, info %q", conf.Hub, h.info.URL)
	}
	for path, want := range map[string]os.FileMode{h.info.AdminConfig: 0o600, dir: 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if code := get(t, conf.Hub+"/v1/devices", conf.Token); code != http.StatusOK {
		t.Errorf("admin token: %d", code)
	}
	if _, err := RotateAdminToken(t.Context(), Options{DataDir: dir}); err == nil {
		t.Error("rotated the token of a running hub")
	}
	if err := h.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// A restart rewrites the URL (the port changed) and keeps the token.
	h = start(t, dir, logs)
	conf2, err := readAdminConfig(h.info.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if conf2.Token != conf.Token || conf2.Hub != h.info.URL {
		t.Errorf("after restart: hub %q (want %q), token kept: %v", conf2.Hub, h.info.URL, conf2.Token == conf.Token)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}

	// Lost admin.conf: the hub warns; admin-token --rotate issues a new one.
	if err := os.Remove(h.info.AdminConfig); err != nil {
		t.Fatal(err)
	}
	h = start(t, dir, logs)
	if !strings.Contains(logs.String(), "admin config is missing") {
		t.Errorf("no warning about the missing admin.conf:\n%s", logs.String())
	}
	if _, err := os.Stat(h.info.AdminConfig); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("admin.conf recreated without a token: %v", err)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	path, err := RotateAdminToken(t.Context(), Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h = start(t, dir, logs)
	defer h.stop()
	conf3, err := readAdminConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if conf3.Token == conf.Token || conf3.Hub != h.info.URL {
		t.Errorf("rotated config %q", conf3.Hub)
	}
	if code := get(t, conf3.Hub+"/v1/devices", conf3.Token); code != http.StatusOK {
		t.Errorf("new token: %d", code)
	}
	if code := get(t, conf3.Hub+"/v1/devices", conf.Token); code != http.StatusUnauthorized {
		t.Errorf("old token: %d", code)
	}
	if strings.Contains(logs.String(), conf.Token) || strings.Contains(logs.String(), conf3.Token) {
		t.Error("a token was logged")
	}
	assertNoPlaintext(t, filepath.Join(dir, "store"), conf.Token, conf3.Token)
}

func assertNoPlaintext(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a plaintext token", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunFailsOnBusyAddress(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, &lockedBuffer{})
	defer h.stop()
	addr := strings.TrimPrefix(h.info.URL, "http://")
	err := Run(t.Context(), Options{DataDir: t.TempDir(), HTTPAddr: addr, MQTTAddr: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("second hub on %s: %v", addr, err)
	}
}
