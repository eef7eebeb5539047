package controller

import (
	"testing"

	"github.com/fleetmq/fleet/schema"
)

// TestSameApplyCarriesConfig: a Deployment applied in one transaction with
// the Secret and ConfigMap it uses, the Deployment first, and a pass that
// runs after the Deployment's event but before theirs (the watch may hand
// them over so): the first desired state the device gets already carries
// both, at their stored versions, so its agent never lacks them. Their
// late events change nothing; an update of all three in one apply is the
// same; a later ConfigMap change still reaches the device.
func TestSameApplyCarriesConfig(t *testing.T) {
	st := openStore(t, t.TempDir())
	s := newStepper(t, st)
	k := newDeviceKey(t)
	s.write(dev("a"))
	s.report("a", k.public)

	apply := func(dep *schema.Deployment, sec *schema.Secret, cm *schema.ConfigMap) *schema.DesiredState {
		t.Helper()
		res, err := st.ApplyAll(t.Context(), []schema.Object{dep, sec, cm}, false)
		if err != nil {
			t.Fatal(err)
		}
		s.await(schema.KindDeployment, dep.Metadata.Name) // not the Secret's, nor the ConfigMap's
		before := s.published()
		s.c.pass(t.Context())
		if s.published() != before+1 {
			t.Fatalf("the pass after the Deployment's event published %d desired states, want 1", s.published()-before)
		}
		ds := s.pub.desired(t, "a")
		if got := secretNames(ds); got != "creds" {
			t.Fatalf("the first desired state with the pod carries secrets %q, want creds: the device would report CreateContainerConfigError", got)
		}
		if got := cmNames(ds); got != "gw" {
			t.Fatalf("the first desired state with the pod carries configmaps %q, want gw", got)
		}
		if v := ds.Secrets[0].Version; v != res[1].Object.GetMetadata().ResourceVersion {
			t.Errorf("secret version %s, want the applied %s", v, res[1].Object.GetMetadata().ResourceVersion)
		}
		if v := ds.ConfigMaps[0].Version; v != res[2].Object.GetMetadata().ResourceVersion {
			t.Errorf("configmap version %s, want the applied %s", v, res[2].Object.GetMetadata().ResourceVersion)
		}
		// The Secret's and the ConfigMap's own events follow: nothing to
		// change.
		s.await(schema.KindConfigMap, "gw")
		s.c.pass(t.Context())
		if s.published() != before+1 {
			t.Errorf("the late events of the same apply published %d more desired states", s.published()-before-1)
		}
		checkConfigFixpoint(t, s.c, "after the late events")
		return ds
	}

	ds := apply(usingDepl("app", []string{"gw"}, []string{"creds"}, ""),
		secret("creds", map[string]string{"token": "v1"}), configMap("gw", map[string]string{"MODE": "slow"}))
	if v, ok := k.open(ds.Secrets[0].Data["token"]); !ok || string(v) != "v1" {
		t.Errorf("secret opens to %q %v, want v1", v, ok)
	}

	d2 := usingDepl("app", []string{"gw"}, []string{"creds"}, "")
	d2.Spec.Template.Spec.Containers[0].Image = "img:2"
	ds = apply(d2, secret("creds", map[string]string{"token": "v2"}), configMap("gw", map[string]string{"MODE": "fast"}))
	if v, ok := k.open(ds.Secrets[0].Data["token"]); !ok || string(v) != "v2" || ds.ConfigMaps[0].Data["MODE"] != "fast" {
		t.Errorf("an update of all three: secret %q %v, MODE %q; want v2, fast", v, ok, ds.ConfigMaps[0].Data["MODE"])
	}

	s.write(configMap("gw", map[string]string{"MODE": "turbo"}))
	if got := s.pub.desired(t, "a").ConfigMaps[0].Data["MODE"]; got != "turbo" {
		t.Errorf("a later ConfigMap change: MODE %q, want turbo", got)
	}
}

// BenchmarkDeploymentUsesRead is what a Deployment event now adds to the
// next pass: reading from the store the two Secrets (decrypted) and two
// ConfigMaps its template uses.
//
//	go test -run XXX -bench DeploymentUsesRead ./hub/controller/
func BenchmarkDeploymentUsesRead(b *testing.B) {
	st := openStoreB(b)
	objs := []schema.Object{
		configMap("cm-a", map[string]string{"A": "1"}), configMap("cm-b", map[string]string{"B": "2"}),
		secret("s-a", map[string]string{"token": "a"}), secret("s-b", map[string]string{"token": "b"}),
	}
	if _, err := st.ApplyAll(b.Context(), objs, false); err != nil {
		b.Fatal(err)
	}
	d := usingDepl("app", []string{"cm-a", "cm-b"}, []string{"s-a", "s-b"}, "")
	cs := newConfigState()
	b.ResetTimer()
	for range b.N {
		cs.noteUses(d)
		if err := cs.loadPending(b.Context(), st); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if len(cs.secrets) != 2 || len(cs.configMaps) != 2 {
		b.Fatalf("read %d secrets, %d configmaps", len(cs.secrets), len(cs.configMaps))
	}
}
