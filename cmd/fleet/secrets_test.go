package main

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

const cliSecretValue = "cli-s3cr3t-value"

// configYAML is a ConfigMap, an Opaque Secret and a registry Secret.
var configYAML = `apiVersion: fleet/v1
kind: ConfigMap
metadata:
  name: gw
  labels: {site: lab}
data:
  mode: fast
  gateway.ini: |
    interval=5
    retries=3
binaryData:
  logo.png: ` + base64.StdEncoding.EncodeToString([]byte{0x89, 'P', 'N', 'G'}) + `
---
apiVersion: fleet/v1
kind: Secret
metadata:
  name: creds
  labels: {site: lab}
stringData:
  token: ` + cliSecretValue + `
data:
  user: ` + base64.StdEncoding.EncodeToString([]byte("admin")) + `
---
apiVersion: fleet/v1
kind: Secret
metadata:
  name: registry
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths":{"r.example":{"auth":"` + cliSecretValue + `"}}}'
`

// noSecretValue fails if out shows a secret value, in any form.
func noSecretValue(t *testing.T, what, out string) {
	t.Helper()
	for _, v := range []string{cliSecretValue, base64.StdEncoding.EncodeToString([]byte(cliSecretValue)), "YWRtaW4="} {
		if strings.Contains(out, v) {
			t.Errorf("%s shows a secret value:\n%s", what, out)
		}
	}
}

func TestConfigKindsGet(t *testing.T) {
	e := newEnv(t)
	out := e.ok("", "apply", "-f", e.file("config.yaml", configYAML))
	if out != "configmap/gw created\nsecret/creds created\nsecret/registry created\n" {
		t.Errorf("apply:\n%s", out)
	}
	noSecretValue(t, "apply", out)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "configmaps"}, "NAME   DATA   AGE\ngw     3      "},
		{[]string{"get", "cm", "gw", "-o", "wide"}, "NAME   DATA   AGE   KEYS                        LABELS\ngw     3      "},
		{[]string{"get", "cm", "gw", "-o", "wide"}, "   gateway.ini,logo.png,mode   site=lab\n"},
		{[]string{"get", "secrets"}, "NAME       TYPE                             DATA   AGE\ncreds      Opaque                           2      "},
		{[]string{"get", "secrets"}, "\nregistry   kubernetes.io/dockerconfigjson   1      "},
		{[]string{"get", "secret", "creds", "-o", "wide"}, "   token,user   site=lab\n"},
		{[]string{"get", "secrets", "-o", "name"}, "secret/creds\nsecret/registry\n"},
		{[]string{"get", "secrets", "-l", "site=lab", "-o", "name"}, "secret/creds\n"},
		{[]string{"get", "secret/creds", "configmap/gw", "-o", "name"}, "secret/creds\nconfigmap/gw\n"},
		{[]string{"get", "secret", "creds", "-o", "json"}, `"keys": {` + "\n" + `        "token": 16,` + "\n" + `        "user": 5` + "\n"},
		{[]string{"get", "secret", "creds", "-o", "yaml"}, "keys:\n  token: 16\n  user: 5\nkind: Secret\n"},
		{[]string{"get", "secrets", "-o", "yaml"}, "kind: SecretList\n"},
		{[]string{"get", "configmaps", "-o", "json"}, `"kind": "ConfigMapList"`},
		{[]string{"get", "secrets", "-o", "jsonpath={.items[*].keys.token}"}, "16"},
		{[]string{"get", "secrets", "-o", "custom-columns=NAME:.metadata.name,TYPE:.type", "--sort-by=.metadata.name"}, "NAME       TYPE\ncreds      Opaque\nregistry   kubernetes.io/dockerconfigjson\n"},
	} {
		out := e.ok("", tt.args...)
		if !strings.Contains(out, tt.want) {
			t.Errorf("fleet %s: missing %q in\n%s", strings.Join(tt.args, " "), tt.want, out)
		}
		noSecretValue(t, "fleet "+strings.Join(tt.args, " "), out)
	}
	// The fake hub stored the values the CLI sent.
	if s := e.hub.Secret("creds"); s == nil || string(s.Data["token"]) != cliSecretValue || string(s.Data["user"]) != "admin" {
		t.Errorf("stored: %+v", s)
	}
	// Re-applying is unchanged.
	if out := e.ok("", "apply", "-f", e.file("config.yaml", configYAML)); !strings.Contains(out, "secret/creds unchanged") {
		t.Errorf("re-apply:\n%s", out)
	}
	if r := e.run("", "get", "secrets", "missing"); r.code != 1 || !strings.Contains(r.stderr, `Secret "missing" not found`) {
		t.Errorf("missing secret: %+v", r)
	}
}

func TestConfigKindsDescribe(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("config.yaml", configYAML))
	out := e.ok("", "describe", "secret", "creds")
	for _, w := range []string{
		"Name:              creds\n", "Labels:            site=lab\n",
		"Type:              Opaque\n", "Data:\n  token:  16 bytes\n  user:   5 bytes\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("describe secret: missing %q in\n%s", w, out)
		}
	}
	noSecretValue(t, "describe secret", out)
	out = e.ok("", "describe", "secrets")
	if !strings.Contains(out, "Name:              creds\n") || !strings.Contains(out, "Type:              kubernetes.io/dockerconfigjson\n") ||
		!strings.Contains(out, "  .dockerconfigjson:  51 bytes\n") {
		t.Errorf("describe secrets:\n%s", out)
	}
	noSecretValue(t, "describe secrets", out)

	out = e.ok("", "describe", "cm", "gw")
	for _, w := range []string{
		"Name:              gw\n",
		"Data:\n  gateway.ini:\n    interval=5\n    retries=3\n  mode:  fast\n",
		"Binary Data:\n  logo.png:  4 bytes\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("describe configmap: missing %q in\n%s", w, out)
		}
	}

	// A deployment's description says where its variables come from.
	dep := strings.Replace(webYAML, `        env:
        - name: MODE
          value: prod`, `        env:
        - name: MODE
          value: prod
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: creds, key: token}}
        - name: LEVEL
          valueFrom: {configMapKeyRef: {name: gw, key: mode, optional: true}}
        envFrom:
        - configMapRef: {name: gw}
          prefix: GW_`, 1)
	dep = strings.Replace(dep, "      containers:", "      imagePullSecrets: [{name: registry}]\n      containers:", 1)
	e.ok("", "apply", "-f", e.file("web.yaml", dep))
	out = e.ok("", "describe", "deployment", "web")
	for _, w := range []string{
		"Image Pull Secrets:  registry\n",
		"Environment Variables from:\n        gw  ConfigMap  Optional: false  Prefix: GW_\n",
		"TOKEN:  <set to the key 'token' in secret 'creds'>  Optional: false\n",
		"LEVEL:  <set to the key 'mode' of config map 'gw'>  Optional: true\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("describe deployment: missing %q in\n%s", w, out)
		}
	}
}

func TestConfigKindsDelete(t *testing.T) {
	e := newEnv(t)
	e.ok("", "apply", "-f", e.file("config.yaml", configYAML))
	if out := e.ok("", "delete", "secret", "creds"); out != "secret/creds deleted\n" {
		t.Errorf("delete secret: %q", out)
	}
	if out := e.ok("", "delete", "configmaps", "-l", "site=lab"); out != "configmap/gw deleted\n" {
		t.Errorf("delete configmaps -l: %q", out)
	}
	if r := e.run("", "delete", "secret", "creds"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("delete a deleted secret: %+v", r)
	}
	e.ok("", "delete", "secret", "creds", "--ignore-not-found")
	if out := e.ok("", "delete", "-f", e.file("config.yaml", configYAML), "--ignore-not-found"); out != "secret/registry deleted\n" {
		t.Errorf("delete -f: %q", out)
	}
	if e.hub.Secret("registry") != nil || e.hub.ConfigMap("gw") != nil {
		t.Error("not deleted")
	}
}

// TestConfigKindsDiff: fleet diff shows a ConfigMap's data, a Secret's
// keys by size, and a change of a Secret's values (found with a
// server-side dry run) without showing them.
func TestConfigKindsDiff(t *testing.T) {
	e := newEnv(t)
	f := e.file("config.yaml", configYAML)
	r := e.run("", "diff", "-f", f)
	if r.code != 1 || !strings.Contains(r.stdout, "+++ secret/creds ("+f+")\n") || !strings.Contains(r.stdout, "+  token: <16 bytes>\n") {
		t.Fatalf("diff of new objects: %+v", r)
	}
	noSecretValue(t, "diff", r.stdout)
	e.ok("", "apply", "-f", f)
	if r := e.run("", "diff", "-f", f); r.code != 0 || r.stdout != "" {
		t.Fatalf("diff after apply: %+v", r)
	}
	// The same size, another value: only the hub can tell.
	same := strings.Replace(configYAML, cliSecretValue, strings.ToUpper(cliSecretValue), 1)
	r = e.run("", "diff", "-f", e.file("same-size.yaml", same))
	if r.code != 1 || !strings.Contains(r.stdout, "+values: changed (not shown)\n") || strings.Contains(r.stdout, "registry") {
		t.Fatalf("diff of a value of the same size: %+v", r)
	}
	noSecretValue(t, "diff", r.stdout)
	if strings.Contains(r.stdout, strings.ToUpper(cliSecretValue)) {
		t.Errorf("diff shows the new value:\n%s", r.stdout)
	}
	// Another size, and a ConfigMap change.
	longer := strings.Replace(configYAML, cliSecretValue, cliSecretValue+"-2", 1)
	longer = strings.Replace(longer, "mode: fast", "mode: slow", 1)
	r = e.run("", "diff", "-f", e.file("longer.yaml", longer))
	for _, w := range []string{"-  token: <16 bytes>\n+  token: <18 bytes>\n", "+values: changed (not shown)\n", "-  mode: fast\n+  mode: slow\n"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("diff: missing %q in\n%s", w, r.stdout)
		}
	}
	noSecretValue(t, "diff", r.stdout)
	// A label change alone is not a change of values.
	labelled := strings.Replace(configYAML, "  name: creds\n  labels: {site: lab}", "  name: creds\n  labels: {site: hall}", 1)
	r = e.run("", "diff", "-f", e.file("labelled.yaml", labelled))
	if r.code != 1 || strings.Contains(r.stdout, "values:") || !strings.Contains(r.stdout, "+    site: hall\n") {
		t.Errorf("diff of a label: %+v", r)
	}
	if s := e.hub.Secret("creds"); string(s.Data["token"]) != cliSecretValue {
		t.Error("fleet diff changed the secret")
	}
}

// TestSecretKeysDocumented: the read-only field the hub answers is part
// of the Secret type fleet explain describes.
func TestSecretKeysDocumented(t *testing.T) {
	if !strings.Contains(schema.TypeDoc("Secret"), "Secret") {
		t.Fatal("no doc table for Secret: go generate ./schema/")
	}
	out := newEnv(t).ok("", "explain", "secret")
	if !strings.Contains(out, "keys") {
		t.Errorf("fleet explain secret does not list keys:\n%s", out)
	}
}
