package backup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// testKey is a passphrase key with a cheap scrypt (tests only).
func testKey(pass string) Key { return Key{Passphrase: pass, scryptLogN: 10} }

// newHubDir makes a data directory with a real store and a few files.
func newHubDir(t *testing.T) (string, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "store")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	dep := &schema.Deployment{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment},
		Metadata: schema.ObjectMeta{Name: "web"},
		Spec: schema.DeploymentSpec{
			Selector: schema.LabelSelector{MatchLabels: map[string]string{"site": "a"}},
			Template: schema.PodTemplate{Spec: schema.PodSpec{Containers: []schema.Container{{Name: "app", Image: "nginx:1"}}}},
		},
	}
	if _, _, err := st.Apply(t.Context(), dep, false); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "admin.conf": 0o600} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("content of "+name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".admin.conf.123"), []byte("temp"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, st
}

func writeBackup(t *testing.T, dir string, st *store.Store, key Key) ([]byte, Manifest) {
	t.Helper()
	var buf bytes.Buffer
	var progressed int64
	m, err := Write(t.Context(), &buf, Source{Store: st, DataDir: dir, Progress: func(n int64) { progressed = n }}, key)
	if err != nil {
		t.Fatal(err)
	}
	if progressed != int64(buf.Len()) {
		t.Errorf("progress said %d bytes, wrote %d", progressed, buf.Len())
	}
	return buf.Bytes(), m
}

func TestWriteRestoreRoundTrip(t *testing.T) {
	dir, st := newHubDir(t)
	key := testKey("correct horse battery staple")
	raw, m := writeBackup(t, dir, st, key)
	if bytes.Contains(raw, []byte("content of ca.key")) || bytes.Contains(raw, []byte("nginx:1")) {
		t.Fatal("the backup holds clear text")
	}
	rev, _ := st.Revision(t.Context())
	if m.Revision != rev || m.Hub.StoreID != st.ID() || m.Objects["deployments"] != 1 {
		t.Errorf("manifest %+v, store revision %d", m, rev)
	}
	got, err := Inspect(bytes.NewReader(raw), key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != m.Revision || len(got.Parts) != 5 { // store + 3 files + secrets.key, no temp file
		t.Errorf("inspect: %+v", got)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(t.Context(), bytes.NewReader(raw), key, RestoreOptions{DataDir: dst, From: "b.age"}); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "admin.conf": 0o600} {
		b, err := os.ReadFile(filepath.Join(dst, name))
		fi, _ := os.Stat(filepath.Join(dst, name))
		if err != nil || string(b) != "content of "+name || fi.Mode().Perm() != mode {
			t.Errorf("%s: %q %v mode %v", name, b, err, fi.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(dst, ".admin.conf.123")); err == nil {
		t.Error("a temporary file was backed up")
	}
	if !bytes.Equal(mustRead(t, filepath.Join(dst, store.SecretKeyFileName)), mustRead(t, filepath.Join(dir, store.SecretKeyFileName))) {
		t.Error("the Secrets key was not restored")
	}
	rs, err := store.Open(store.Options{Dir: filepath.Join(dst, "store")})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if rs.ID() != st.ID() {
		t.Errorf("restored store ID %s, want %s", rs.ID(), st.ID())
	}
	if _, err := rs.Get(t.Context(), schema.KindDeployment, "web"); err != nil {
		t.Errorf("restored deployment: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRecipientKey(t *testing.T) {
	dir, st := newHubDir(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := writeBackup(t, dir, st, Key{Recipients: []string{id.Recipient().String()}})
	if _, err := Inspect(bytes.NewReader(raw), Key{Identities: []string{id.String()}}); err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	if _, err := Inspect(bytes.NewReader(raw), Key{Identities: []string{other.String()}}); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another identity: %v", err)
	}
}

func TestBadBackupsAreRefused(t *testing.T) {
	dir, st := newHubDir(t)
	key := testKey("correct horse battery staple")
	raw, _ := writeBackup(t, dir, st, key)
	flip := func(at int) []byte {
		b := bytes.Clone(raw)
		b[at] ^= 0x01
		return b
	}
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "ca.crt"), []byte("other hub"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		key  Key
		dir  string
		want error
		msg  string
	}{
		{"flipped byte in the body", flip(len(raw) - 100), key, "", ErrCorrupt, "damaged"},
		{"flipped byte in the header", flip(60), key, "", nil, ""},
		{"cut short", raw[:len(raw)-10], key, "", ErrCorrupt, "damaged"},
		{"wrong passphrase", raw, testKey("not the right passphrase"), "", ErrWrongKey, "wrong passphrase"},
		{"not a backup", []byte("#!/bin/sh\necho not a backup\n"), key, "", ErrNotBackup, "not age-encrypted"},
		{"non-empty dir", raw, key, nonEmpty, nil, "not empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := tc.dir
			if dst == "" {
				dst = filepath.Join(t.TempDir(), "restored")
			}
			_, err := Restore(t.Context(), bytes.NewReader(tc.data), tc.key, RestoreOptions{DataDir: dst})
			if err == nil {
				t.Fatal("restore succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want it to say %q", err, tc.msg)
			}
			if tc.dir == "" {
				if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a failed restore left %s behind: %v", dst, err)
				}
				left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".*restoring*"))
				if len(left) > 0 {
					t.Errorf("a failed restore left %v", left)
				}
			}
		})
	}
	if b := mustRead(t, filepath.Join(nonEmpty, "ca.crt")); string(b) != "other hub" {
		t.Errorf("the other hub's data dir was overwritten: %q", b)
	}
}

func TestKeyFlags(t *testing.T) {
	t.Setenv(EnvPassphrase, "")
	if _, err := (KeyFlags{}).Key("backup"); err == nil || !strings.Contains(err.Error(), "never written in clear") {
		t.Errorf("no key: %v", err)
	}
	t.Setenv(EnvPassphrase, "from the environment")
	k, err := (KeyFlags{}).Key("backup")
	if err != nil || k.Passphrase != "from the environment" {
		t.Errorf("env: %+v %v", k, err)
	}
	if _, err := (Key{Passphrase: "short"}).recipients(); err == nil {
		t.Error("a short passphrase was accepted")
	}
	if _, err := (Key{Recipients: []string{"age1nope"}}).recipients(); err == nil || !strings.Contains(err.Error(), "--recipient") {
		t.Errorf("bad recipient: %v", err)
	}
}

// fakeClock is a clock the test advances.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
	ch  chan time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) After(time.Duration) <-chan time.Time {
	return c.ch
}
func (c *fakeClock) tick(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.ch <- now
}

func TestSchedulerWritesAtomicallyAndPrunes(t *testing.T) {
	dir, st := newHubDir(t)
	out := filepath.Join(t.TempDir(), "backups")
	clk := &fakeClock{now: time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC), ch: make(chan time.Time)}
	results := make(chan Result, 10)
	s, err := NewScheduler(SchedulerOptions{
		Dir: out, Every: time.Hour, Keep: 2, Key: testKey("correct horse battery staple"),
		Source: Source{Store: st, DataDir: dir}, Clock: clk,
		OnResult: func(r Result) { results <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	var paths []string
	for range 3 {
		clk.tick(time.Hour)
		r := <-results
		if r.Err != nil || r.Size == 0 {
			t.Fatalf("result %+v", r)
		}
		fi, err := os.Stat(r.Path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", r.Path, fi, err)
		}
		paths = append(paths, r.Path)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	names, err := List(out)
	if err != nil || len(names) != 2 || filepath.Join(out, names[0]) != paths[1] {
		t.Errorf("kept %v (%v), want the last two of %v", names, err, paths)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 2 {
		t.Errorf("%d entries in the backup dir: temporary files left?", len(entries))
	}

	// A failing backup (its directory is a file) is reported.
	bad := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s2, _ := NewScheduler(SchedulerOptions{Dir: bad, Every: time.Hour, Key: testKey("correct horse battery staple"), Source: Source{Store: st, DataDir: dir}, Clock: clk})
	if r := s2.Once(t.Context()); r.Err == nil {
		t.Error("a backup into a file succeeded")
	}
	if _, err := NewScheduler(SchedulerOptions{Dir: out, Every: time.Hour, Source: Source{Store: st, DataDir: dir}}); err == nil {
		t.Error("a scheduler without a key was accepted")
	}
}
