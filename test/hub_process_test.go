package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestMain(m *testing.M) {
	// Build the real binaries once, before any test starts a process.
	if _, err := BuildBinary("fleet-hub"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	RemoveBinaries()
	os.Exit(code)
}

func deploymentManifest(name, image, rv string) []byte {
	meta := "  name: " + name + "\n"
	if rv != "" {
		meta += "  resourceVersion: \"" + rv + "\"\n"
	}
	return []byte("apiVersion: fleet/v1\nkind: Deployment\nmetadata:\n" + meta + `spec:
  selector:
    matchLabels: {site: lab}
  template:
    spec:
      containers:
      - name: app
        image: ` + image + "\n")
}

func TestHubProcessAcknowledgedApplySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	var last schema.ApplyResponse
	for i := range 5 {
		code, body := h.Do(t, "POST", "/v1/apply", deploymentManifest("web", fmt.Sprintf("nginx:1.%d", i), ""))
		if code != http.StatusOK {
			t.Fatalf("apply %d: %d %s", i, code, body)
		}
		if err := json.Unmarshal(body, &last); err != nil {
			t.Fatal(err)
		}
	}
	// SIGKILL right after the last 200: no clean shutdown.
	h.Kill()
	var acked schema.Deployment
	if err := json.Unmarshal(last.Results[0].Object, &acked); err != nil {
		t.Fatal(err)
	}

	h.Restart()
	code, body := h.Do(t, "GET", "/v1/deployments/web", nil)
	if code != http.StatusOK {
		t.Fatalf("get after restart: %d %s", code, body)
	}
	var got schema.Deployment
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.ResourceVersion != acked.Metadata.ResourceVersion || got.Metadata.Generation != 5 ||
		got.Spec.Template.Spec.Containers[0].Image != "nginx:1.4" || got.Metadata.UID != acked.Metadata.UID {
		t.Errorf("after restart: rv %s gen %d image %s; acknowledged rv %s gen 5 image nginx:1.4",
			got.Metadata.ResourceVersion, got.Metadata.Generation, got.Spec.Template.Spec.Containers[0].Image, acked.Metadata.ResourceVersion)
	}
	// The revision counter continues after the crash.
	code, body = h.Do(t, "POST", "/v1/apply", deploymentManifest("web", "nginx:2", ""))
	if code != http.StatusOK {
		t.Fatalf("apply after restart: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &last); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(last.Results[0].Object, &got); err != nil {
		t.Fatal(err)
	}
	before, _ := strconv.ParseUint(acked.Metadata.ResourceVersion, 10, 64)
	after, _ := strconv.ParseUint(got.Metadata.ResourceVersion, 10, 64)
	if after <= before {
		t.Errorf("resourceVersion went from %s to %s across the crash", acked.Metadata.ResourceVersion, got.Metadata.ResourceVersion)
	}
}

func TestHubProcessConcurrentPUTsOneWins(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	code, body := h.Do(t, "POST", "/v1/deployments", deploymentManifest("web", "nginx:1", ""))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var created schema.Deployment
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatal(err)
	}
	const n = 20
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			codes[i], _ = h.Do(t, "PUT", "/v1/deployments/web", deploymentManifest("web", fmt.Sprintf("nginx:%d", i+2), created.Metadata.ResourceVersion))
		})
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusOK] != 1 || count[http.StatusConflict] != n-1 {
		t.Errorf("status codes %v, want one 200 and %d 409", count, n-1)
	}
}

func TestHubProcessAdminConfig(t *testing.T) {
	t.Parallel()
	h := StartHub(t, HubOptions{})
	fi, err := os.Stat(h.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.conf mode %v, want 0600", fi.Mode().Perm())
	}
	if !strings.Contains(h.Logs(), h.AdminConfig()) || !strings.Contains(h.Logs(), h.URL) {
		t.Errorf("the start line does not name admin.conf and the API address:\n%s", h.Logs())
	}
	if code, _ := h.Do(t, "GET", "/v1/devices", nil); code != http.StatusOK {
		t.Errorf("admin token from admin.conf: %d", code)
	}
	token, url := h.Token, h.URL
	wrong := &Hub{URL: h.URL, Token: strings.Repeat("x", len(token))}
	if code, _ := wrong.Do(t, "GET", "/v1/devices", nil); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}

	// A clean stop (SIGTERM) exits 0, even with a watch stream open; a
	// restart keeps the token and rewrites the URL.
	req, err := http.NewRequestWithContext(t.Context(), "GET", h.URL+"/v1/devices?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %v %v", err, resp)
	}
	defer resp.Body.Close()
	if err := h.Stop(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Logf("watch stream ended with %v", err)
	}
	if strings.Contains(h.Logs(), token) {
		t.Error("the admin token was logged")
	}
	assertNoPlaintext(t, filepath.Join(h.DataDir, "store"), token)
	h.Restart()
	if h.Token != token {
		t.Error("restart changed the admin token")
	}
	if h.URL == url {
		t.Logf("the kernel gave the same port again (%s)", url)
	}
	if code, _ := h.Do(t, "GET", "/v1/devices", nil); code != http.StatusOK {
		t.Errorf("after restart: %d", code)
	}
}

func assertNoPlaintext(t *testing.T, dir, secret string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the plaintext token", p)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk %s: %v (%d files)", dir, err, files)
	}
}
