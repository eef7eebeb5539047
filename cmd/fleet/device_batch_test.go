package main

import (
	"encoding/csv"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestDeviceAddFromFile(t *testing.T) {
	e, st := newTokenEnv(t)
	e.ok("", "device", "add", "pi-old", "--label", "site=old")
	file := e.file("devices.csv", `name,labels,description
# the kitchen
pi-1,site=lab;room=a,Pi in the kitchen
pi-2,"site=lab,room=b"
pi-3
pi-old,site=new
`)
	r := e.run("", "device", "add", "--from-file", file)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if err != nil || len(rows) != 5 || strings.Join(rows[0], ",") != "name,action,token" {
		t.Fatalf("output %q (%v): want a CSV header and 4 rows", r.stdout, err)
	}
	for i, want := range []string{"pi-1 created", "pi-2 created", "pi-3 created", "pi-old unchanged"} {
		row := rows[i+1]
		if row[0]+" "+row[1] != want || !st.VerifyToken(row[0], row[2]) {
			t.Errorf("row %d: %q, want %s with a token that verifies", i+1, row, want)
		}
	}
	if !strings.Contains(r.stderr, "4 devices registered (3 created, 1 existed") {
		t.Errorf("stderr %q: want the summary", r.stderr)
	}
	d, err := st.Get(t.Context(), schema.KindDevice, "pi-1")
	if err != nil || d.GetMetadata().Labels["room"] != "a" || d.(*schema.Device).Spec.Description != "Pi in the kitchen" {
		t.Errorf("pi-1: %+v, %v", d, err)
	}
	if d, _ := st.Get(t.Context(), schema.KindDevice, "pi-2"); d == nil || d.GetMetadata().Labels["room"] != "b" {
		t.Errorf("pi-2 (labels in a quoted field): %+v", d)
	}
	if d, _ := st.Get(t.Context(), schema.KindDevice, "pi-old"); d == nil || d.GetMetadata().Labels["site"] != "old" {
		t.Errorf("pi-old: %+v, want its own labels kept", d)
	}
	// -o json from stdin.
	var res schema.DeviceBatchResult
	mustJSON(t, e.ok("pi-9,site=x\n", "device", "add", "--from-file", "-", "-o", "json"), &res)
	if len(res.Items) != 1 || res.Items[0].Name != "pi-9" || !st.VerifyToken("pi-9", res.Items[0].Token) {
		t.Errorf("-o json: %+v", res)
	}
}

func TestDeviceAddFromFileBadRowsStoreNothing(t *testing.T) {
	e, st := newTokenEnv(t)
	for _, tc := range []struct{ file, want string }{
		{"a-1\na-2\nBad_Name\n", "line 3"},
		{"a-1\na-2\na-1\n", "line 3: device a-1 is also on line 1"},
		{"a-1,site=lab;bad key=x\n", "line 1"},
		{"a-1,site=lab,desc,extra\n", "line 1: 4 fields"},
		{"# only a comment\n", "no devices"},
	} {
		r := e.run("", "device", "add", "--from-file", e.file("d.csv", tc.file))
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want an error saying %q", tc.file, r.code, r.stderr, tc.want)
		}
	}
	if devs, _, err := st.ListDevices(t.Context(), nil); err != nil || len(devs) != 0 {
		t.Errorf("after bad files: %d devices stored (%v), want none", len(devs), err)
	}
	if r := e.run("", "device", "add", "pi-1", "--from-file", e.file("d.csv", "a-1\n")); r.code == 0 || !strings.Contains(r.stderr, "--from-file takes no NAME") {
		t.Errorf("NAME and --from-file: exit %d, %q", r.code, r.stderr)
	}
	if r := e.run("", "device", "add", "--from-file", e.file("nope/d.csv", "")+".missing"); r.code == 0 || !strings.Contains(r.stderr, "--from-file") {
		t.Errorf("missing file: exit %d, %q", r.code, r.stderr)
	}
}
