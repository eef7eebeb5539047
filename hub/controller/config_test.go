package controller

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/nacl/box"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func TestPodRefs(t *testing.T) {
	opt := true
	p := schema.PodSpec{
		ImagePullSecrets: []schema.LocalObjectReference{{Name: "registry"}, {Name: "registry"}},
		InitContainers: []schema.Container{{Name: "init", Env: []schema.EnvVar{
			{Name: "A", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "init-secret", Key: "k"}}},
		}}},
		Containers: []schema.Container{{
			Name: "app",
			Env: []schema.EnvVar{
				{Name: "PLAIN", Value: "x"},
				{Name: "B", ValueFrom: &schema.EnvVarSource{ConfigMapKeyRef: &schema.KeySelector{Name: "cm-b", Key: "k", Optional: &opt}}},
				{Name: "C", ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: "creds", Key: "k"}}},
			},
			EnvFrom: []schema.EnvFromSource{
				{ConfigMapRef: &schema.ObjectRef{Name: "cm-a"}},
				{SecretRef: &schema.ObjectRef{Name: "creds"}, Prefix: "X_"},
			},
		}},
		Volumes: []schema.Volume{
			{Name: "v1", ConfigMap: &schema.ConfigMapVolume{Name: "cm-files"}},
			{Name: "v2", Secret: &schema.SecretVolume{SecretName: "tls"}},
			{Name: "v3", EmptyDir: &schema.EmptyDirVolume{}},
		},
	}
	cms, secs := PodRefs(&p)
	if got, want := strings.Join(cms, ","), "cm-a,cm-b,cm-files"; got != want {
		t.Errorf("configmaps %s, want %s", got, want)
	}
	if got, want := strings.Join(secs, ","), "creds,init-secret,registry,tls"; got != want {
		t.Errorf("secrets %s, want %s", got, want)
	}
	if cms, secs := PodRefs(&schema.PodSpec{Containers: []schema.Container{{Name: "a"}}}); len(cms)+len(secs) != 0 {
		t.Errorf("no references: %v %v", cms, secs)
	}
}

// deviceKeyPair is a device's X25519 key, as edgeagent/devicekey makes it.
type deviceKeyPair struct {
	pub, priv *[32]byte
	public    string // base64, as reported
}

func newDeviceKey(t *testing.T) deviceKeyPair {
	t.Helper()
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return deviceKeyPair{pub: pub, priv: priv, public: base64.StdEncoding.EncodeToString(pub[:])}
}

func (k deviceKeyPair) open(sealed []byte) ([]byte, bool) {
	return box.OpenAnonymous(nil, sealed, k.pub, k.priv)
}

// stepper drives a controller pass by pass, without Run: every write is
// followed by its store event and one pass, so what a pass published can
// be counted exactly.
type stepper struct {
	t      *testing.T
	st     *store.Store
	c      *Controller
	pub    *recorder
	status *fakeStatus
	events <-chan store.Event
}

func newStepper(t *testing.T, st *store.Store) *stepper {
	t.Helper()
	return newStepperWith(t, st, &fakeStatus{st: map[string]*schema.DeviceStatus{}})
}

// newStepperWith starts a stepper whose devices' reports are status's
// from its first pass on, as the hub loads them before it.
func newStepperWith(t *testing.T, st *store.Store, status *fakeStatus) *stepper {
	t.Helper()
	s := &stepper{t: t, st: st, pub: newRecorder(), status: status}
	c, err := New(Options{Store: st, Conn: s.pub, Status: s.status})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.events, err = st.Watch(t.Context(), "", c.listRev); err != nil {
		t.Fatal(err)
	}
	s.c = c
	c.pass(t.Context())
	return s
}

// await applies the store's events to the controller up to the one for
// this object.
func (s *stepper) await(kind, name string) {
	s.t.Helper()
	for {
		select {
		case ev := <-s.events:
			s.c.apply(ev)
			if ev.Kind == kind && ev.Name == name {
				return
			}
		case <-time.After(5 * time.Second):
			s.t.Fatalf("no store event for %s %s", kind, name)
		}
	}
}

// write applies objects, waits for their events and runs a pass.
func (s *stepper) write(objs ...schema.Object) {
	s.t.Helper()
	res, err := s.st.ApplyAll(s.t.Context(), objs, false)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, r := range res {
		if r.Action != schema.ActionUnchanged {
			s.await(r.Object.GetTypeMeta().Kind, r.Object.GetMetadata().Name)
		}
	}
	s.c.pass(s.t.Context())
}

func (s *stepper) delete(kind, name string) {
	s.t.Helper()
	if _, err := s.st.Delete(s.t.Context(), kind, name, "", false); err != nil {
		s.t.Fatal(err)
	}
	s.await(kind, name)
	s.c.pass(s.t.Context())
}

// report sets a device's status with its public key and runs a pass.
func (s *stepper) report(name, publicKey string) {
	s.status.set(name, &schema.DeviceStatus{Device: name, PublicKey: publicKey})
	s.c.DeviceStatusChanged(name)
	s.c.pass(s.t.Context())
}

func (s *stepper) published() int { return s.pub.count("fleet/v1/devices/", "/desired") }

func (s *stepper) gens() map[string]int64 {
	out := map[string]int64{}
	for name, ds := range s.c.model.DesiredStates() {
		out[name] = ds.Generation
	}
	return out
}

// bumped returns, sorted, the devices whose generation grew since before.
func (s *stepper) bumped(before map[string]int64) string {
	var out []string
	for name, g := range s.gens() {
		if g > before[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func configMap(name string, data map[string]string) *schema.ConfigMap {
	return &schema.ConfigMap{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindConfigMap},
		Metadata: schema.ObjectMeta{Name: name}, Data: data}
}

func secret(name string, data map[string]string) *schema.Secret {
	s := &schema.Secret{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func dockerSecret(name, config string) *schema.Secret {
	s := secret(name, map[string]string{schema.DockerConfigJSONKey: config})
	s.Type = schema.SecretDockerConfigJSON
	return s
}

// usingDepl is a deployment whose pod takes variables from the named
// ConfigMaps (envFrom) and Secrets (secretKeyRef "token"), and pulls with
// pullSecret if set.
func usingDepl(name string, configMaps, secrets []string, pullSecret string, match ...string) *schema.Deployment {
	d := depl(name, "img:1", match...)
	c := &d.Spec.Template.Spec.Containers[0]
	for _, cm := range configMaps {
		c.EnvFrom = append(c.EnvFrom, schema.EnvFromSource{ConfigMapRef: &schema.ObjectRef{Name: cm}})
	}
	for i, s := range secrets {
		c.Env = append(c.Env, schema.EnvVar{Name: fmt.Sprintf("S%d", i), ValueFrom: &schema.EnvVarSource{SecretKeyRef: &schema.KeySelector{Name: s, Key: "token"}}})
	}
	if pullSecret != "" {
		d.Spec.Template.Spec.ImagePullSecrets = []schema.LocalObjectReference{{Name: pullSecret}}
	}
	return d
}

func names[T any](items []T, name func(T) string) string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = name(it)
	}
	return strings.Join(out, ",")
}

func cmNames(ds *schema.DesiredState) string {
	return names(ds.ConfigMaps, func(c schema.ConfigMapData) string { return c.Name })
}

func secretNames(ds *schema.DesiredState) string {
	return names(ds.Secrets, func(s schema.SealedSecret) string { return s.Name })
}

// TestDesiredStateCarriesConfig: each device gets the ConfigMaps and
// Secrets its pods use, each once, sorted, at their resourceVersion, the
// Secrets sealed to its own key: they open with its private key and with
// no other. A device without a key gets no Secrets; a missing object is
// left out.
func TestDesiredStateCarriesConfig(t *testing.T) {
	st := openStore(t, t.TempDir())
	s := newStepper(t, st)
	ka, kb := newDeviceKey(t), newDeviceKey(t)
	s.write(
		dev("a", "role", "sensor"), dev("b", "role", "sensor", "extra", "yes"), dev("c", "role", "sensor"), dev("d"),
		configMap("gw", map[string]string{"gateway.ini": "interval=5\n"}),
		configMap("extra", map[string]string{"E": "1"}),
		secret("creds", map[string]string{"token": "s3cr3t-a"}),
		dockerSecret("registry", `{"auths":{}}`),
		secret("unused", map[string]string{"token": "never-sent"}),
	)
	s.report("a", ka.public)
	s.report("b", kb.public)
	s.write(
		usingDepl("sensor", []string{"gw", "missing-cm"}, []string{"creds", "missing-secret"}, "registry", "role", "sensor"),
		usingDepl("extra", []string{"extra", "gw"}, []string{"creds"}, "", "extra", "yes"),
	)
	cms, err := st.Get(t.Context(), schema.KindConfigMap, "gw")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := st.Get(t.Context(), schema.KindSecret, "creds")
	if err != nil {
		t.Fatal(err)
	}

	a := s.pub.desired(t, "a")
	if got := cmNames(a); got != "gw" {
		t.Errorf("a configmaps %s", got)
	}
	if got := secretNames(a); got != "creds,registry" {
		t.Errorf("a secrets %s", got)
	}
	if a.ConfigMaps[0].Version != cms.GetMetadata().ResourceVersion || a.ConfigMaps[0].Data["gateway.ini"] != "interval=5\n" {
		t.Errorf("a configmap %+v", a.ConfigMaps[0])
	}
	sa := a.Secrets[0]
	if sa.Version != creds.GetMetadata().ResourceVersion || sa.KeyID != schema.DeviceKeyID(ka.public) || sa.Type != schema.SecretOpaque {
		t.Errorf("a secret %+v", sa)
	}
	if v, ok := ka.open(sa.Data["token"]); !ok || string(v) != "s3cr3t-a" {
		t.Errorf("a cannot open its secret: %q %v", v, ok)
	}
	if _, ok := kb.open(sa.Data["token"]); ok {
		t.Error("b opens a's secret")
	}
	if bytes.Contains(s.pub.retained["fleet/v1/devices/a/desired"], []byte("s3cr3t-a")) {
		t.Error("the value travels in clear")
	}
	if reg := a.Secrets[1]; reg.Type != schema.SecretDockerConfigJSON {
		t.Errorf("registry secret %+v", reg)
	}

	b := s.pub.desired(t, "b")
	if got := cmNames(b); got != "extra,gw" {
		t.Errorf("b configmaps %s (each once, sorted)", got)
	}
	if got := secretNames(b); got != "creds,registry" {
		t.Errorf("b secrets %s", got)
	}
	if v, ok := kb.open(b.Secrets[0].Data["token"]); !ok || string(v) != "s3cr3t-a" {
		t.Errorf("b cannot open its secret: %q %v", v, ok)
	}
	if _, ok := ka.open(b.Secrets[0].Data["token"]); ok {
		t.Error("a opens b's secret")
	}

	c := s.pub.desired(t, "c")
	if got := cmNames(c); got != "gw" || len(c.Secrets) != 0 || len(c.Pods) != 1 {
		t.Errorf("c (no key): configmaps %s, secrets %s, pods %d", got, secretNames(c), len(c.Pods))
	}
	if d := s.pub.desired(t, "d"); len(d.ConfigMaps)+len(d.Secrets) != 0 {
		t.Errorf("d uses nothing: %+v", d)
	}
	for _, raw := range s.pub.retained {
		if bytes.Contains(raw, []byte("never-sent")) {
			t.Error("an unused secret was sent")
		}
	}
}

// TestConfigChangeReachesOnlyItsUsers counts desired states: a change to
// a ConfigMap or Secret gives a new generation to exactly the devices
// whose pods use it, and nothing else is published; a re-apply, or a
// change of an unused object, publishes nothing.
func TestConfigChangeReachesOnlyItsUsers(t *testing.T) {
	st := openStore(t, t.TempDir())
	s := newStepper(t, st)
	keys := map[string]deviceKeyPair{}
	for _, n := range []string{"a", "b", "c", "d"} {
		keys[n] = newDeviceKey(t)
	}
	s.write(dev("a", "app", "x"), dev("b", "app", "x"), dev("c", "app", "y"), dev("d", "app", "z"),
		configMap("cm-x", map[string]string{"k": "1"}), configMap("cm-y", map[string]string{"k": "1"}),
		secret("s-x", map[string]string{"token": "x1"}), secret("s-all", map[string]string{"token": "all1"}),
		secret("s-unused", map[string]string{"token": "u1"}))
	for n, k := range keys {
		s.report(n, k.public)
	}
	s.write(
		usingDepl("x", []string{"cm-x"}, []string{"s-x", "s-all"}, "", "app", "x"),
		usingDepl("y", []string{"cm-y"}, []string{"s-all"}, "", "app", "y"),
	)

	for _, step := range []struct {
		what string
		do   func()
		want string // devices with a new generation
	}{
		{"configmap of x changes", func() { s.write(configMap("cm-x", map[string]string{"k": "2"})) }, "a,b"},
		{"configmap of y changes", func() { s.write(configMap("cm-y", map[string]string{"k": "2"})) }, "c"},
		{"same configmap again", func() { s.write(configMap("cm-y", map[string]string{"k": "2"})) }, ""},
		{"secret of x changes", func() { s.write(secret("s-x", map[string]string{"token": "x2"})) }, "a,b"},
		{"secret of all changes", func() { s.write(secret("s-all", map[string]string{"token": "all2"})) }, "a,b,c"},
		{"same secret again", func() { s.write(secret("s-all", map[string]string{"token": "all2"})) }, ""},
		{"unused secret changes", func() { s.write(secret("s-unused", map[string]string{"token": "u2"})) }, ""},
		{"unused configmap created", func() { s.write(configMap("cm-new", map[string]string{"k": "1"})) }, ""},
		{"label change of a configmap", func() {
			cm := configMap("cm-y", map[string]string{"k": "2"})
			cm.Metadata.Labels = map[string]string{"l": "1"}
			s.write(cm) // a new resourceVersion: the agent may see it
		}, "c"},
		{"a reports the same key", func() { s.report("a", keys["a"].public) }, ""},
		{"a reports a new key", func() { keys["a"] = newDeviceKey(t); s.report("a", keys["a"].public) }, "a"},
		{"d (no secrets) reports a new key", func() { s.report("d", newDeviceKey(t).public) }, ""},
		{"secret of x deleted", func() { s.delete(schema.KindSecret, "s-x") }, "a,b"},
		{"secret of x created again", func() { s.write(secret("s-x", map[string]string{"token": "x3"})) }, "a,b"},
		{"configmap of y deleted", func() { s.delete(schema.KindConfigMap, "cm-y") }, "c"},
	} {
		before, n := s.gens(), s.published()
		step.do()
		got := s.bumped(before)
		if got != step.want {
			t.Errorf("%s: new generation for %q, want %q", step.what, got, step.want)
		}
		wantN := 0
		if step.want != "" {
			wantN = len(strings.Split(step.want, ","))
		}
		if pub := s.published() - n; pub != wantN {
			t.Errorf("%s: %d desired states published, want one per device in %q", step.what, pub, step.want)
		}
		if c := s.c.fullPasses.Load(); c != 1 {
			t.Fatalf("%s: %d full passes: the steps must be incremental", step.what, c)
		}
	}
	a := s.pub.desired(t, "a")
	for _, sec := range a.Secrets {
		if v, ok := keys["a"].open(sec.Data["token"]); !ok || !strings.HasPrefix(string(v), strings.TrimPrefix(sec.Name, "s-")) {
			t.Errorf("a's %s after its new key: %q %v", sec.Name, v, ok)
		}
	}
	checkConfigFixpoint(t, s.c, "end")
}

// TestSealedSecretsReused: a pod change that leaves a device's Secrets as
// they were keeps their sealed bytes (nothing is sealed again); a restart
// publishes the stored states and bumps nothing.
func TestSealedSecretsReused(t *testing.T) {
	st := openStore(t, t.TempDir())
	s := newStepper(t, st)
	k := newDeviceKey(t)
	s.write(dev("a"), secret("creds", map[string]string{"token": "t"}))
	s.report("a", k.public)
	s.write(usingDepl("app", nil, []string{"creds"}, ""))
	first := s.pub.desired(t, "a")
	d := usingDepl("app", nil, []string{"creds"}, "")
	d.Spec.Template.Spec.Containers[0].Image = "img:2"
	s.write(d)
	second := s.pub.desired(t, "a")
	if second.Generation != first.Generation+1 || second.Pods[0].Hash == first.Pods[0].Hash {
		t.Fatalf("the pod did not change: %d %d", first.Generation, second.Generation)
	}
	if !bytes.Equal(first.Secrets[0].Data["token"], second.Secrets[0].Data["token"]) {
		t.Error("the secret was sealed again though nothing about it changed")
	}

	// A new controller on the same store, with the stored reports: it
	// republishes what is stored.
	s2 := newStepperWith(t, st, s.status)
	if n := s2.published(); n != 1 {
		t.Errorf("a restart published %d desired states, want the 1 stored", n)
	}
	if got := s2.pub.desired(t, "a"); got.Generation != second.Generation || !bytes.Equal(got.Secrets[0].Data["token"], second.Secrets[0].Data["token"]) {
		t.Errorf("after a restart: generation %d, want %d, same sealed bytes", got.Generation, second.Generation)
	}
}

// TestEnrollmentKeyUsed: a device that sent its key when it enrolled gets
// its Secrets before it ever reports; the key it reports later wins.
func TestEnrollmentKeyUsed(t *testing.T) {
	st := openStore(t, t.TempDir())
	s := newStepper(t, st)
	s.write(secret("creds", map[string]string{"token": "t"}), usingDepl("app", nil, []string{"creds"}, ""))
	tok, _, err := st.CreateBootstrapToken(t.Context(), store.BootstrapTokenSpec{})
	if err != nil {
		t.Fatal(err)
	}
	enrolled := newDeviceKey(t)
	_, err = st.Enroll(t.Context(), store.Enrollment{Token: tok, RequestID: "req_aaaaaaaaaaaaaaaa", Secret: strings.Repeat("x", 40), Device: "pi", PublicKey: enrolled.public})
	if err != nil {
		t.Fatal(err)
	}
	s.await(schema.KindDevice, "pi")
	s.c.pass(t.Context())
	ds := s.pub.desired(t, "pi")
	if ds == nil || len(ds.Secrets) != 1 || ds.Secrets[0].KeyID != schema.DeviceKeyID(enrolled.public) {
		t.Fatalf("enrolled device: %+v", ds)
	}
	if _, ok := enrolled.open(ds.Secrets[0].Data["token"]); !ok {
		t.Error("sealed to another key")
	}
	reported := newDeviceKey(t)
	s.report("pi", reported.public)
	ds = s.pub.desired(t, "pi")
	if ds.Secrets[0].KeyID != schema.DeviceKeyID(reported.public) {
		t.Errorf("the reported key does not win: %s", ds.Secrets[0].KeyID)
	}
	// A hub restart still knows the enrollment key.
	s2 := newStepper(t, st)
	if got := s2.c.cfg.enrollKeys["pi"]; got != enrolled.public {
		t.Errorf("enrollment key after a restart: %q", got)
	}
}

// checkConfigFixpoint fails unless a full recomputation would give every
// device the ConfigMaps and Secrets it has.
func checkConfigFixpoint(t *testing.T, c *Controller, when string) {
	t.Helper()
	for _, name := range c.fleet.names() {
		ds := c.model.Desired(name)
		if ds == nil {
			continue
		}
		if r := c.writer.resolve(name, ds.Pods); !r.same(ds) {
			t.Fatalf("%s: device %s has configmaps %s secrets %s, a full pass gives another set", when, name, cmNames(ds), secretNames(ds))
		}
	}
}
