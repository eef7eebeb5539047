package main

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// TestAuditAndCredentialCLI runs fleet credential and fleet audit against
// the hub's real API and store: a viewer is created and refused a write,
// and the trail shows the writes, the refusal and the credential change.
func TestAuditAndCredentialCLI(t *testing.T) {
	e, _ := newTokenEnv(t)
	e.ok("", "apply", "-f", e.file("dev.yaml", deviceYAML))
	var cred schema.Credential
	mustJSON(t, e.ok("", "credential", "add", "ci", "--role", "viewer", "-o", "json"), &cred)
	if cred.Name != "ci" || cred.Role != schema.RoleViewer || len(cred.Token) < 32 {
		t.Fatalf("credential add: %+v", cred)
	}
	if r := e.run("", "credential", "add", "x", "--role", "root"); r.code == 0 || !strings.Contains(r.stderr, `--role "root"`) {
		t.Fatalf("unknown role: %+v", r)
	}
	if out := e.ok("", "credential", "list"); !strings.Contains(out, "ci      viewer") || strings.Contains(out, cred.Token) {
		t.Fatalf("credential list:\n%s", out)
	}
	// The viewer reads but does not write, and may not read the trail.
	admin := e.vars["FLEET_TOKEN"]
	e.vars["FLEET_TOKEN"] = cred.Token
	if out := e.ok("", "get", "devices", "-o", "name"); out != "device/pi-1\n" {
		t.Fatalf("viewer get: %q", out)
	}
	if r := e.run("", "delete", "device", "pi-1"); r.code == 0 || !strings.Contains(r.stderr, "may only read") {
		t.Fatalf("viewer delete: %+v", r)
	}
	if r := e.run("", "audit"); r.code == 0 || !strings.Contains(r.stderr, "admin only") {
		t.Fatalf("viewer audit: %+v", r)
	}
	e.vars["FLEET_TOKEN"] = admin

	out := e.ok("", "audit", "-o", "wide")
	// Columns compared with single spaces.
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	flat := strings.Join(lines, "\n")
	for _, want := range []string{
		"admin admin 127.0.0.1 apply devices/pi-1 ok - devices/pi-1 created\n",
		"admin admin 127.0.0.1 create credentials/ci ok - role viewer\n",
		"ci viewer 127.0.0.1 use-token - ok 1 GET /v1/devices\n",
		`ci viewer 127.0.0.1 delete devices/pi-1 403 1 credential "ci" (role viewer) may only read` + "\n",
		"ci viewer 127.0.0.1 get audit 403",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("fleet audit -o wide: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, cred.Token) || strings.Contains(out, admin) {
		t.Errorf("a token in the trail:\n%s", out)
	}
	if out := e.ok("", "audit", "--actor", "ci", "--no-headers"); strings.Count(out, "\n") != 3 || strings.Contains(out, "admin ") {
		t.Errorf("--actor ci: want the use, the refused delete and the refused audit read:\n%s", out)
	}
	var l schema.AuditList
	mustJSON(t, e.ok("", "audit", "--limit", "1", "-o", "json"), &l)
	if l.Kind != "AuditList" || len(l.Items) != 1 {
		t.Fatalf("--limit 1 -o json: %+v", l)
	}
	if r := e.run("", "audit", "--since", "yesterday"); r.code == 0 || !strings.Contains(r.stderr, "--since") {
		t.Fatalf("bad --since: %+v", r)
	}
	if r := e.run("", "audit", "--since", "1ns"); r.code != 0 || r.stderr != "No audit entries found.\n" {
		t.Fatalf("--since 1ns: %+v", r)
	}
	if out := e.ok("", "credential", "delete", "ci"); out != "credential/ci deleted\n" {
		t.Fatalf("credential delete: %q", out)
	}
	if r := e.run("", "credential", "delete", "admin"); r.code == 0 || !strings.Contains(r.stderr, "hub's own admin credential") {
		t.Fatalf("delete admin: %+v", r)
	}
}

// TestAuditVerifyCLI: fleet audit verify exits 0 on an intact chain and
// prints its head; after an entry is edited in the store it exits
// non-zero naming that entry.
func TestAuditVerifyCLI(t *testing.T) {
	e, st := newTokenEnv(t)
	e.ok("", "apply", "-f", e.file("dev.yaml", deviceYAML))
	e.ok("", "apply", "-f", e.file("dev.yaml", deviceYAML))
	if out := e.ok("", "audit", "verify"); !strings.HasPrefix(out, "audit trail intact: ") || !strings.Contains(out, "\nhead ") {
		t.Fatalf("verify:\n%s", out)
	}
	var v schema.AuditVerification
	mustJSON(t, e.ok("", "audit", "verify", "-o", "json"), &v)
	if !v.OK || v.Entries < 3 || len(v.Head) != 64 {
		t.Fatalf("verify -o json: %+v", v)
	}
	// Edit the first entry (the first apply) behind the hub's back.
	_, err := st.Write(t.Context(), func(tx *store.Txn) error {
		b, err := tx.Get(store.AuditKey(1))
		if err != nil {
			return err
		}
		return tx.Set(store.AuditKey(1), []byte(strings.Replace(string(b), `"actor":"admin"`, `"actor":"nobody"`, 1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	r := e.run("", "audit", "verify")
	if r.code == 0 || !strings.Contains(r.stderr, "audit trail broken at entry 1: edited") {
		t.Fatalf("verify after an edit: %+v", r)
	}
}
