package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

const apiSecretValue = "hunter2-api-0b6e4d"

func secretYAML(name, value string) string {
	return `apiVersion: fleet/v1
kind: Secret
metadata:
  name: ` + name + `
stringData:
  token: ` + value + `
data:
  user: ` + base64.StdEncoding.EncodeToString([]byte("admin")) + `
`
}

const configMapYAML = `apiVersion: fleet/v1
kind: ConfigMap
metadata:
  name: gw
  labels:
    site: a
data:
  gateway.ini: |
    interval=5
`

// noValue fails if b carries the secret value in any form.
func noValue(t *testing.T, what string, b []byte) {
	t.Helper()
	for _, v := range []string{apiSecretValue, base64.StdEncoding.EncodeToString([]byte(apiSecretValue)), base64.StdEncoding.EncodeToString([]byte("admin"))} {
		if bytes.Contains(b, []byte(v)) {
			t.Errorf("%s carries a secret value: %s", what, b)
		}
	}
	if bytes.Contains(b, []byte(`"encrypted"`)) || bytes.Contains(b, []byte(`"stringData"`)) {
		t.Errorf("%s carries sealed or string data: %s", what, b)
	}
}

// TestSecretRedacted: apply, create, update, get, list, watch and delete
// answers carry a Secret's keys and their sizes, never its values, and
// the logs never do either.
func TestSecretRedacted(t *testing.T) {
	h := newTestHub(t, Options{})
	w := h.watch(t, "/v1/secrets?watch=true")

	resp := h.admin(t, http.MethodPost, "/v1/apply", secretYAML("creds", apiSecretValue)+"---\n"+configMapYAML)
	if resp.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", resp.Code, resp.Body)
	}
	noValue(t, "apply", resp.Body)
	var ar schema.ApplyResponse
	if err := json.Unmarshal(resp.Body, &ar); err != nil || len(ar.Results) != 2 {
		t.Fatalf("apply: %s %v", resp.Body, err)
	}
	var applied schema.Secret
	if err := json.Unmarshal(ar.Results[0].Object, &applied); err != nil {
		t.Fatal(err)
	}
	wantKeys := map[string]int{"token": len(apiSecretValue), "user": 5}
	if !equalKeys(applied.Keys, wantKeys) || applied.Data != nil || applied.Type != schema.SecretOpaque {
		t.Errorf("applied: %+v", applied)
	}

	again := h.admin(t, http.MethodPost, "/v1/apply", secretYAML("creds", apiSecretValue))
	if !strings.Contains(string(again.Body), `"action":"unchanged"`) {
		t.Errorf("re-apply: %s", again.Body)
	}
	noValue(t, "re-apply", again.Body)
	dry := h.admin(t, http.MethodPost, "/v1/apply?dryRun=server", secretYAML("creds", apiSecretValue+"x"))
	if !strings.Contains(string(dry.Body), `"action":"configured"`) {
		t.Errorf("dry run: %s", dry.Body)
	}
	noValue(t, "dry run", dry.Body)

	get := h.admin(t, http.MethodGet, "/v1/secrets/creds", "")
	if get.Code != http.StatusOK {
		t.Fatalf("get: %d %s", get.Code, get.Body)
	}
	noValue(t, "get", get.Body)
	var got schema.Secret
	if err := json.Unmarshal(get.Body, &got); err != nil || !equalKeys(got.Keys, wantKeys) {
		t.Errorf("get: %s %v", get.Body, err)
	}

	list := h.admin(t, http.MethodGet, "/v1/secrets", "")
	noValue(t, "list", list.Body)
	var l schema.SecretList
	if err := json.Unmarshal(list.Body, &l); err != nil || l.Kind != "SecretList" || len(l.Items) != 1 || !equalKeys(l.Items[0].Keys, wantKeys) {
		t.Errorf("list: %s %v", list.Body, err)
	}

	create := h.admin(t, http.MethodPost, "/v1/secrets", secretYAML("other", apiSecretValue))
	if create.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", create.Code, create.Body)
	}
	noValue(t, "create", create.Body)
	update := h.admin(t, http.MethodPut, "/v1/secrets/other", secretYAML("other", apiSecretValue+"2"))
	if update.Code != http.StatusOK {
		t.Fatalf("update: %d %s", update.Code, update.Body)
	}
	noValue(t, "update", update.Body)
	del := h.admin(t, http.MethodDelete, "/v1/secrets/other", "")
	if del.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", del.Code, del.Body)
	}
	noValue(t, "delete", del.Body)

	// The watch: ADDED creds, ADDED other, MODIFIED other, DELETED other;
	// a new watch starts with ADDED creds.
	for range 4 {
		ev, ok := w.next(t, false)
		if !ok {
			t.Fatal("watch ended")
		}
		noValue(t, "watch "+ev.Type, ev.Object)
		var s schema.Secret
		if err := json.Unmarshal(ev.Object, &s); err != nil || len(s.Keys) != 2 {
			t.Errorf("watch %s: %s", ev.Type, ev.Object)
		}
	}
	w2 := h.watch(t, "/v1/secrets?watch=true")
	ev, _ := w2.next(t, false)
	noValue(t, "initial watch", ev.Object)
	if ev.Type != schema.WatchAdded || !bytes.Contains(ev.Object, []byte(`"keys"`)) {
		t.Errorf("initial watch: %s %s", ev.Type, ev.Object)
	}

	cm := h.admin(t, http.MethodGet, "/v1/configmaps/gw", "")
	var c schema.ConfigMap
	if err := json.Unmarshal(cm.Body, &c); err != nil || c.Data["gateway.ini"] != "interval=5\n" {
		t.Errorf("configmap: %s %v", cm.Body, err)
	}
	noValue(t, "logs", []byte(h.Logs.String()))
}

func equalKeys(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestMonitorCannotReadSecrets: a monitor gets 403 naming the resource on
// every read of Secrets, and of ConfigMaps.
func TestMonitorCannotReadSecrets(t *testing.T) {
	h := newTestHub(t, Options{})
	if r := h.admin(t, http.MethodPost, "/v1/apply", secretYAML("creds", apiSecretValue)+"---\n"+configMapYAML); r.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", r.Code, r.Body)
	}
	for _, path := range []string{"/v1/secrets", "/v1/secrets/creds", "/v1/secrets/missing", "/v1/secrets?watch=true", "/v1/secrets?labelSelector=a=b"} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			r := h.do(t, method, path, h.Monitor, nil)
			if r.Code != http.StatusForbidden {
				t.Errorf("monitor %s %s: %d %s", method, path, r.Code, r.Body)
				continue
			}
			if method == http.MethodGet {
				st := r.status(t)
				if st.Reason != ReasonForbidden || !strings.Contains(st.Message, "secrets") || !strings.Contains(st.Message, "grafana") {
					t.Errorf("monitor %s: %+v", path, st)
				}
				noValue(t, "403", r.Body)
			}
		}
	}
	// Nor ConfigMaps (least privilege: they are spec, not status).
	for _, path := range []string{"/v1/configmaps", "/v1/configmaps/gw"} {
		r := h.do(t, http.MethodGet, path, h.Monitor, nil)
		if r.Code != http.StatusForbidden || strings.Contains(string(r.Body), "interval=5") {
			t.Errorf("monitor GET %s: %d %s", path, r.Code, r.Body)
		}
	}
	r := h.do(t, http.MethodPost, "/v1/apply", h.Monitor, []byte(configMapYAML))
	if r.Code != http.StatusForbidden {
		t.Errorf("monitor apply: %d", r.Code)
	}
}

// TestConfigKindsBadInput: invalid ConfigMaps and Secrets are 400 naming
// the field, and nothing is stored.
func TestConfigKindsBadInput(t *testing.T) {
	h := newTestHub(t, Options{})
	for _, tt := range []struct {
		name, body, field string
	}{
		{"bad key", "apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\nstringData: {\"a/b\": x}\n", "data"},
		{"bad type", "apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/tls\nstringData: {a: x}\n", "type"},
		{"docker config without its key", "apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/dockerconfigjson\nstringData: {a: x}\n", "data"},
		{"not base64", "apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: \"!!notbase64\"}\n", "data"},
		{"unknown field", "apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\nvalues: {a: x}\n", "values"},
		{"configmap key in both", "apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\nbinaryData: {a: eA==}\n", "binaryData"},
		{"configmap bad name", "apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\ndata: {a: x}\n", "metadata.name"},
		{"configmap too large", "apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: " + strings.Repeat("x", schema.MaxConfigBytes) + "}\n", "data"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := h.admin(t, http.MethodPost, "/v1/apply", tt.body)
			if r.Code != http.StatusBadRequest {
				t.Fatalf("%d %s", r.Code, r.Body)
			}
			st := r.status(t)
			found := false
			for _, d := range st.Details {
				if strings.HasPrefix(d.Field, tt.field) {
					found = true
				}
			}
			if !found {
				t.Errorf("no detail naming %s: %+v", tt.field, st)
			}
			noValue(t, "400", r.Body)
		})
	}
	for _, res := range []string{"secrets", "configmaps"} {
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		r := h.admin(t, http.MethodGet, "/v1/"+res, "")
		if err := json.Unmarshal(r.Body, &l); err != nil || len(l.Items) != 0 {
			t.Errorf("%s stored: %s", res, r.Body)
		}
	}
	r := h.admin(t, http.MethodGet, "/v1/widgets", "")
	if r.Code != http.StatusNotFound || !strings.Contains(r.status(t).Message, "configmaps, secrets") {
		t.Errorf("unknown resource: %d %s", r.Code, r.Body)
	}
}

// TestPodReferencesAccepted: a deployment referencing ConfigMaps and
// Secrets (missing ones too) is accepted, as Kubernetes does.
func TestPodReferencesAccepted(t *testing.T) {
	h := newTestHub(t, Options{})
	dep := `apiVersion: fleet/v1
kind: Deployment
metadata: {name: sensor}
spec:
  selector: {matchLabels: {site: a}}
  template:
    spec:
      imagePullSecrets: [{name: registry}]
      containers:
      - name: app
        image: busybox:1.36
        env:
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: missing, key: token}}
        - name: MODE
          valueFrom: {configMapKeyRef: {name: gw, key: mode}}
        envFrom:
        - configMapRef: {name: gw}
        - secretRef: {name: creds}
          prefix: CREDS_
`
	r := h.admin(t, http.MethodPost, "/v1/apply", dep)
	if r.Code != http.StatusOK {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
}
