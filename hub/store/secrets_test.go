package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

const testSecretValue = "s3cr3t-value-7f0c2e9a"

func newSecret(name string, data map[string]string) *schema.Secret {
	s := &schema.Secret{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindSecret},
		Metadata: schema.ObjectMeta{Name: name},
		Data:     map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func newConfigMap(name string, data map[string]string) *schema.ConfigMap {
	return &schema.ConfigMap{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindConfigMap},
		Metadata: schema.ObjectMeta{Name: name},
		Data:     data,
	}
}

// assertNoValue fails if any file under dir holds value, in clear or in
// base64.
func assertNoValue(t *testing.T, dir, value string) {
	t.Helper()
	needles := [][]byte{[]byte(value), []byte(base64.StdEncoding.EncodeToString([]byte(value)))}
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
		for _, n := range needles {
			if bytes.Contains(b, n) {
				t.Errorf("%s holds the secret value", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no files under %s", dir)
	}
}

// TestSecretEncryptedAtRest: no file of the Badger directory holds a
// Secret's value, the key file is 0600 beside it, and the value comes back
// (to the controller only) after a reopen.
func TestSecretEncryptedAtRest(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "store")
	s, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	sec := newSecret("creds", map[string]string{"token": testSecretValue})
	sec.Metadata.Labels = map[string]string{"app": "gw"}
	if _, _, err := s.Apply(ctxT(t), sec, false); err != nil {
		t.Fatal(err)
	}
	// An update with a new value, so the value log has both versions.
	if _, err := s.Update(ctxT(t), newSecret("creds", map[string]string{"token": testSecretValue + "-2"}), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoValue(t, dir, testSecretValue)

	fi, err := os.Stat(filepath.Join(data, SecretKeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}

	s, err = Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got *schema.Secret
	err = s.View(ctxT(t), func(tx *Txn) error {
		var err error
		got, err = tx.GetSecretData("creds")
		return err
	})
	if err != nil || string(got.Data["token"]) != testSecretValue+"-2" || got.Keys != nil {
		t.Fatalf("GetSecretData = %+v, %v", got, err)
	}
	n := 0
	err = s.View(ctxT(t), func(tx *Txn) error {
		return tx.ListSecretData(func(s *schema.Secret) error {
			n++
			if string(s.Data["token"]) != testSecretValue+"-2" {
				t.Errorf("ListSecretData: %+v", s)
			}
			return nil
		})
	})
	if err != nil || n != 1 {
		t.Fatalf("ListSecretData: %d, %v", n, err)
	}
}

// TestSecretKeyFileChecked: a store whose key file is missing or replaced
// does not open (and does not make a new key), rather than losing its
// Secrets.
func TestSecretKeyFileChecked(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "store")
	keyFile := filepath.Join(data, SecretKeyFileName)
	s, err := Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(ctxT(t), newSecret("creds", map[string]string{"token": testSecretValue}), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, GCInterval: -1}); !errors.Is(err, ErrSecretKey) || !strings.Contains(err.Error(), "restore") {
		t.Errorf("open without the key file: %v", err)
	}
	if _, err := os.Stat(keyFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a new key file was made: %v", err)
	}

	other := []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n")
	if err := os.WriteFile(keyFile, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, GCInterval: -1}); !errors.Is(err, ErrSecretKey) {
		t.Errorf("open with another key: %v", err)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, GCInterval: -1}); !errors.Is(err, ErrSecretKey) {
		t.Errorf("open with a malformed key file: %v", err)
	}

	if err := os.WriteFile(keyFile, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatalf("open with the right key: %v", err)
	}
	s.Close()
}

// TestSecretSealedPerName: a sealed value moved under another Secret's
// name does not open.
func TestSecretSealedPerName(t *testing.T) {
	s := openTest(t, Options{})
	sd, err := s.secretKey.seal("a", map[string][]byte{"k": []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.secretKey.open("b", sd); !errors.Is(err, ErrSecretKey) {
		t.Errorf("opened under another name: %v", err)
	}
	got, err := s.secretKey.open("a", sd)
	if err != nil || string(got["k"]) != "v" {
		t.Errorf("open: %v %v", got, err)
	}
}

// TestSecretNeverReturned: every way an object leaves the store carries a
// Secret's keys and sizes, never its values.
func TestSecretNeverReturned(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	events, err := s.Watch(ctx, schema.KindSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(testSecretValue)) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString([]byte(testSecretValue)))) {
			t.Errorf("%s carries the value: %s", what, b)
		}
		if bytes.Contains(b, []byte(`"encrypted"`)) {
			t.Errorf("%s carries the sealed value: %s", what, b)
		}
	}
	checkPublic := func(what string, o schema.Object) {
		t.Helper()
		check(what, o)
		sec, ok := o.(*schema.Secret)
		if !ok || sec.Data != nil || sec.StringData != nil || sec.Keys["token"] != len(testSecretValue) {
			t.Errorf("%s: %+v", what, o)
		}
	}
	sec := newSecret("creds", nil)
	sec.StringData = map[string]string{"token": testSecretValue}
	sec.Keys = map[string]int{"forged": 1}
	out, action, err := s.Apply(ctx, sec, false)
	if err != nil || action != schema.ActionCreated {
		t.Fatal(action, err)
	}
	checkPublic("apply", out)
	if k := out.(*schema.Secret).Keys; len(k) != 1 {
		t.Errorf("keys sent by the client kept: %v", k)
	}
	out, _, err = s.Apply(ctx, sec, true)
	if err != nil {
		t.Fatal(err)
	}
	checkPublic("dry-run apply", out)
	got, err := s.Get(ctx, schema.KindSecret, "creds")
	if err != nil {
		t.Fatal(err)
	}
	checkPublic("get", got)
	objs, _, err := s.List(ctx, schema.KindSecret, nil)
	if err != nil || len(objs) != 1 {
		t.Fatal(objs, err)
	}
	checkPublic("list", objs[0])
	_, err = s.ListRawNamed(ctx, schema.KindSecret, func(name string, raw []byte) error {
		check("raw list", json.RawMessage(raw))
		var p schema.Secret
		if err := json.Unmarshal(raw, &p); err != nil || p.Keys["token"] != len(testSecretValue) {
			t.Errorf("raw list: %s %v", raw, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	upd := newSecret("creds", map[string]string{"token": testSecretValue + "!"})
	out, err = s.Update(ctx, upd, false)
	if err != nil {
		t.Fatal(err)
	}
	check("update", out)
	out, err = s.Create(ctx, newSecret("other", map[string]string{"token": testSecretValue}), false)
	if err != nil {
		t.Fatal(err)
	}
	checkPublic("create", out)
	out, err = s.Mutate(ctx, schema.KindSecret, "other", func(o schema.Object) error {
		sec := o.(*schema.Secret)
		if string(sec.Data["token"]) != testSecretValue {
			t.Errorf("mutate sees %+v", sec)
		}
		o.GetMetadata().Labels = map[string]string{"x": "y"}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkPublic("mutate", out)
	out, err = s.Delete(ctx, schema.KindSecret, "creds", "", false)
	if err != nil {
		t.Fatal(err)
	}
	check("delete", out)
	for range 5 { // ADDED, MODIFIED, ADDED, MODIFIED, DELETED
		ev, ok := recv(t, events)
		if !ok {
			t.Fatal("watch ended")
		}
		check("event "+string(ev.Type), json.RawMessage(ev.Object))
		if ev.Prev != nil {
			check("event prev", json.RawMessage(ev.Prev))
		}
	}
	// The mutated Secret kept its value.
	var kept *schema.Secret
	err = s.View(ctx, func(tx *Txn) error {
		kept, err = tx.GetSecretData("other")
		return err
	})
	if err != nil || string(kept.Data["token"]) != testSecretValue || kept.Metadata.Labels["x"] != "y" {
		t.Errorf("after mutate: %+v %v", kept, err)
	}
}

// TestSecretReapplyUnchanged: the same values, as data or stringData, are
// unchanged (the comparison is on the stored plaintext); another value of
// the same size is a change.
func TestSecretReapplyUnchanged(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	first, _, err := s.Apply(ctx, newSecret("creds", map[string]string{"token": "aaaa", "user": "u"}), false)
	if err != nil {
		t.Fatal(err)
	}
	rv, gen := first.GetMetadata().ResourceVersion, first.GetMetadata().Generation
	again := newSecret("creds", map[string]string{"user": "u"})
	again.StringData = map[string]string{"token": "aaaa"}
	out, action, err := s.Apply(ctx, again, false)
	if err != nil || action != schema.ActionUnchanged || out.GetMetadata().ResourceVersion != rv {
		t.Fatalf("re-apply: %s %v %+v", action, err, out)
	}
	out, action, err = s.Apply(ctx, newSecret("creds", map[string]string{"token": "bbbb", "user": "u"}), false)
	if err != nil || action != schema.ActionConfigured || out.GetMetadata().ResourceVersion == rv || out.GetMetadata().Generation != gen+1 {
		t.Fatalf("new value: %s %v %+v", action, err, out)
	}
	typed := newSecret("creds", map[string]string{"token": "bbbb", "user": "u"})
	typed.Type = schema.SecretOpaque
	if _, action, err := s.Apply(ctx, typed, false); err != nil || action != schema.ActionUnchanged {
		t.Fatalf("explicit default type: %s %v", action, err)
	}
}

// TestConfigKindsCRUD: ConfigMaps and Secrets are stored kinds with the
// usual metadata, generation and resourceVersion rules.
func TestConfigKindsCRUD(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	cm := newConfigMap("gw", map[string]string{"gateway.ini": "interval=5\n"})
	out, err := s.Create(ctx, cm, false)
	if err != nil {
		t.Fatal(err)
	}
	md := out.GetMetadata()
	if md.UID == "" || md.Generation != 1 || md.ResourceVersion == "" || md.CreationTimestamp == nil {
		t.Errorf("created: %+v", md)
	}
	if _, err := s.Create(ctx, cm, false); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("create twice: %v", err)
	}
	got, err := s.Get(ctx, schema.KindConfigMap, "gw")
	if err != nil || got.(*schema.ConfigMap).Data["gateway.ini"] != "interval=5\n" {
		t.Fatalf("get: %+v %v", got, err)
	}
	_, action, err := s.Apply(ctx, newConfigMap("gw", map[string]string{"gateway.ini": "interval=5\n"}), false)
	if err != nil || action != schema.ActionUnchanged {
		t.Errorf("re-apply: %s %v", action, err)
	}
	labelled := newConfigMap("gw", map[string]string{"gateway.ini": "interval=5\n"})
	labelled.Metadata.Labels = map[string]string{"site": "a"}
	out, action, err = s.Apply(ctx, labelled, false)
	if err != nil || action != schema.ActionConfigured || out.GetMetadata().Generation != 1 {
		t.Errorf("label change: %s %v %+v", action, err, out.GetMetadata())
	}
	stale := newConfigMap("gw", map[string]string{"gateway.ini": "interval=9\n"})
	stale.Metadata.ResourceVersion = md.ResourceVersion
	if _, err := s.Update(ctx, stale, false); !errors.Is(err, ErrConflict) {
		t.Errorf("stale update: %v", err)
	}
	stale.Metadata.ResourceVersion = ""
	out, err = s.Update(ctx, stale, false)
	if err != nil || out.GetMetadata().Generation != 2 {
		t.Errorf("update: %+v %v", out, err)
	}
	if _, err := s.Create(ctx, newSecret("creds", map[string]string{"token": "x"}), false); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{schema.KindConfigMap, schema.KindSecret} {
		objs, _, err := s.List(ctx, kind, nil)
		if err != nil || len(objs) != 1 {
			t.Errorf("list %s: %v %v", kind, objs, err)
		}
	}
	sel, _, err := s.List(ctx, schema.KindConfigMap, map[string]string{"site": "b"})
	if err != nil || len(sel) != 0 {
		t.Errorf("list with selector: %v %v", sel, err)
	}
	if _, err := s.Delete(ctx, schema.KindConfigMap, "gw", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, schema.KindSecret, "creds", "", false); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{schema.KindConfigMap, schema.KindSecret} {
		if _, err := s.Get(ctx, kind, "gw"); !errors.Is(err, ErrNotFound) {
			t.Errorf("get deleted %s: %v", kind, err)
		}
	}
	bad := newSecret("bad", map[string]string{"no/slash": "x"})
	var ve *schema.ValidationError
	if _, _, err := s.Apply(ctx, bad, false); !errors.As(err, &ve) || ve.Errors[0].Field != "data" {
		t.Errorf("bad key: %v", err)
	}
}

// TestEnrollKeepsDeviceKey: the public key sent at enrollment is kept
// until the device is deleted; a malformed one is refused.
func TestEnrollKeepsDeviceKey(t *testing.T) {
	s := openTest(t, Options{})
	ctx := ctxT(t)
	tok, _, err := s.CreateBootstrapToken(ctx, BootstrapTokenSpec{Uses: 5})
	if err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	secret := strings.Repeat("s", 40)
	if _, err := s.Enroll(ctx, Enrollment{Token: tok, RequestID: "req_aaaaaaaaaaaaaaaa", Secret: secret, Device: "pi", PublicKey: "bad"}); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("malformed key: %v", err)
	}
	if _, err := s.Enroll(ctx, Enrollment{Token: tok, RequestID: "req_bbbbbbbbbbbbbbbb", Secret: secret, Device: "pi", PublicKey: key}); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		var v []byte
		_ = s.View(ctx, func(tx *Txn) error {
			v, _ = tx.Get(DeviceKeyKey("pi"))
			return nil
		})
		return string(v)
	}
	if got := read(); got != key {
		t.Errorf("kept key %q", got)
	}
	if _, err := s.Delete(ctx, schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "" {
		t.Errorf("key kept after delete: %q", got)
	}
}
