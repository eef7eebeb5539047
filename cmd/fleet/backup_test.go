package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// backupHub answers POST /v1/backup as the hub does: the file, then the
// trailers; cut says to end the stream without them, as a hub that
// failed midway does.
func backupHub(t *testing.T, cut bool, got *map[string]any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/backup" || r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+adminToken {
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, got); err != nil {
			t.Errorf("request body %q: %v", b, err)
		}
		w.Header().Set("Trailer", "Fleet-Backup-Revision, Fleet-Backup-Objects")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "age-encryption.org/v1\n(encrypted bytes)")
		if cut {
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Fleet-Backup-Revision", "42")
		w.Header().Set("Fleet-Backup-Objects", `{"devices":3}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestBackupCommand(t *testing.T) {
	e := newEnv(t)
	var req map[string]any
	srv := backupHub(t, false, &req)
	e.vars["FLEET_HUB"] = srv.URL
	if r := e.run("", "backup"); r.code == 0 || !strings.Contains(r.stderr, "-o FILE") {
		t.Errorf("no -o: %+v", r)
	}
	out := filepath.Join(e.dir, "hub.age")
	if r := e.run("", "backup", "-o", out); r.code == 0 || !strings.Contains(r.stderr, "never written in clear") {
		t.Errorf("no key: %+v", r)
	}
	e.vars[envBackupPassphrase] = "from the environment"
	stdout := e.ok("", "backup", "-o", out)
	if !strings.Contains(stdout, "revision 42") || !strings.Contains(stdout, "3 devices") {
		t.Errorf("output: %s", stdout)
	}
	if req["passphrase"] != "from the environment" {
		t.Errorf("request: %v", req)
	}
	b, err := os.ReadFile(out)
	fi, _ := os.Stat(out)
	if err != nil || !strings.HasPrefix(string(b), "age-encryption.org/v1") || fi.Mode().Perm() != 0o600 {
		t.Errorf("file %q mode %v: %v", b, fi.Mode(), err)
	}
	if r := e.run("", "backup", "-o", out); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("over an existing file: %+v", r)
	}
	rf := e.file("recipients.txt", "# ops\nage1abc\n\nage1def\n")
	clear(req)
	e.ok("", "backup", "-o", filepath.Join(e.dir, "r.age"), "--recipient-file", rf, "--recipient", "age1ghi")
	if rs, _ := req["recipients"].([]any); len(rs) != 3 || req["passphrase"] != nil {
		t.Errorf("recipients request: %v", req)
	}
}

func TestBackupCommandCutStream(t *testing.T) {
	e := newEnv(t)
	var req map[string]any
	e.vars["FLEET_HUB"] = backupHub(t, true, &req).URL
	e.vars[envBackupPassphrase] = "from the environment"
	out := filepath.Join(e.dir, "hub.age")
	if r := e.run("", "backup", "-o", out); r.code == 0 {
		t.Fatalf("a cut backup succeeded: %+v", r)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a cut backup was kept")
	}
	if left, _ := filepath.Glob(filepath.Join(e.dir, ".hub.age*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
