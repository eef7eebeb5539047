package store

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func TestCredentialsAndAuthHooks(t *testing.T) {
	s := openTest(t, Options{PasswordHash: func(tok string) (string, error) { return "$x$" + strings.ToUpper(tok[:4]), nil }})
	ctx := ctxT(t)
	var mu sync.Mutex
	var changes []string
	s.OnAuthChange(func(k AuthChangeKind, name string) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, map[AuthChangeKind]string{AuthDevice: "device", AuthCredential: "credential"}[k]+"/"+name)
	})
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(changes)
	}

	if _, err := s.Create(ctx, newDevice("pi", nil), false); err != nil {
		t.Fatal(err)
	}
	tok1, err := s.IssueToken(ctx, "pi")
	if err != nil {
		t.Fatal(err)
	}
	if len(got()) != 0 {
		t.Errorf("a first token reported a change: %v", got())
	}
	if _, err := s.IssueToken(ctx, "pi"); err != nil {
		t.Fatal(err)
	}
	if c := got(); !slices.Equal(c, []string{"device/pi"}) {
		t.Errorf("after rotation: %v", c)
	}

	mtok, err := s.CreateCredential(ctx, "grafana", RoleMonitor)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCredential(ctx, "grafana", RoleMonitor); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second create: %v", err)
	}
	if _, err := s.CreateCredential(ctx, "Bad Name", RoleMonitor); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("bad name: %v", err)
	}
	if role, ok := s.VerifyCredential("grafana", mtok); !ok || role != RoleMonitor {
		t.Errorf("VerifyCredential = %q %v", role, ok)
	}
	for _, c := range []struct{ name, tok string }{{"grafana", mtok + "x"}, {"grafana", ""}, {"other", mtok}, {"pi", tok1}} {
		if _, ok := s.VerifyCredential(c.name, c.tok); ok {
			t.Errorf("VerifyCredential(%s, …) accepted", c.name)
		}
	}
	accts, err := s.Accounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(accts) != 2 || accts[0].Name != "pi" || accts[0].Role != "" || accts[1].Name != "grafana" || accts[1].Role != RoleMonitor ||
		accts[1].PasswordHash != "$x$"+strings.ToUpper(mtok[:4]) || accts[0].PasswordHash == "" {
		t.Errorf("Accounts = %+v", accts)
	}
	creds, err := s.Credentials(ctx)
	if err != nil || len(creds) != 1 || creds[0] != (Credential{Name: "grafana", Role: RoleMonitor}) {
		t.Errorf("Credentials = %+v %v", creds, err)
	}

	if err := s.DeleteCredential(ctx, "grafana"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, schema.KindDevice, "pi", "", false); err != nil {
		t.Fatal(err)
	}
	if c := got(); !slices.Equal(c, []string{"device/pi", "credential/grafana", "device/pi"}) {
		t.Errorf("after deletions: %v", c)
	}
}

func TestListRawNamedAndLocked(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	ctx := ctxT(t)
	for _, n := range []string{"b", "a"} {
		if _, err := s.Create(ctx, newDevice(n, nil), false); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	if _, err := s.ListRawNamed(ctx, schema.KindDevice, func(name string, raw []byte) error {
		if !strings.Contains(string(raw), `"name":"`+name+`"`) {
			t.Errorf("%s: %s", name, raw)
		}
		names = append(names, name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("names %v", names)
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Errorf("second open: %v, want ErrLocked", err)
	}
}
