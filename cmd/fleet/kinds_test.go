package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// TestCLIKnowsEveryKind: every stored kind of schema's table is a
// resource type of the CLI, by each of its names and aliases, in any
// case; it is listed in the errors and completed.
func TestCLIKnowsEveryKind(t *testing.T) {
	for _, k := range schema.StoredKinds() {
		want := client.KindOf(k.Kind)
		for _, n := range slices.Concat(k.Names(), k.Aliases) {
			for _, s := range []string{n, strings.ToUpper(n)} {
				if got, err := parseKind(s); err != nil || got != want {
					t.Errorf("parseKind(%q) = %q, %v; want %q", s, got, err, want)
				}
			}
		}
		if !strings.Contains(validKinds, k.Resource+" ("+k.Singular) {
			t.Errorf("validKinds does not list %s: %s", k.Resource, validKinds)
		}
		if !slices.Contains(completeKinds(""), k.Resource) {
			t.Errorf("%s is not completed", k.Resource)
		}
		if got := (ref{want, "x"}).String(); got != k.Singular+"/x" {
			t.Errorf("ref of %s: %q", k.Kind, got)
		}
	}
	if len(resourceKinds) != len(spellings()) {
		t.Error("resourceKinds is not the table's spellings")
	}
}

func TestValidKinds(t *testing.T) {
	// Today's kinds, in their order; a new one comes after them.
	want := "deployments (deployment, deploy), devices (device, dev), configmaps (configmap, cm), secrets (secret)"
	if !strings.HasPrefix(strings.Replace(validKinds, " and ", ", ", 1), want) {
		t.Errorf("validKinds = %q, want %q", validKinds, want)
	}
	for _, s := range []string{"pods", "desiredstates", "cms", "secret/x"} {
		if _, err := parseKind(s); err == nil || !strings.HasSuffix(err.Error(), "valid types are "+validKinds) {
			t.Errorf("parseKind(%q): %v", s, err)
		}
	}
}
