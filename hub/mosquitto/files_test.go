package mosquitto

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleet/broker"
	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func TestMosquittoFilesLeaveOutWhatTheyCannotRender(t *testing.T) {
	dir := t.TempDir()
	// A store that kept no Mosquitto hashes (tokens issued by an older hub).
	old, err := store.Open(store.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, n := range []string{"legacy", "twin"} {
		if _, err := old.Create(ctx, &schema.Device{Metadata: schema.ObjectMeta{Name: n}}, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.IssueToken(ctx, "legacy"); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: dir, GCInterval: -1, PasswordHash: broker.MosquittoPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.IssueToken(ctx, "twin"); err != nil {
		t.Fatal(err)
	}
	// A monitor credential sharing the device's name (the API refuses
	// that; the store does not).
	if _, err := st.CreateCredential(ctx, "twin", store.RoleMonitor); err != nil {
		t.Fatal(err)
	}
	pw, acl, warnings, err := Files(ctx, st, schema.Topics{}, broker.MosquittoAccount{Identity: broker.Identity{Name: "fleet-hub", Role: broker.RoleHub}, Password: "pw-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pw), "\ntwin:$7$") || strings.Contains(string(pw), "legacy:") || strings.Count(string(pw), "twin:") != 1 {
		t.Errorf("passwd:\n%s", pw)
	}
	if strings.Contains(string(acl), "user twin") {
		t.Errorf("the shadowed monitor got an ACL block:\n%s", acl)
	}
	if len(warnings) != 2 || !strings.Contains(strings.Join(warnings, "\n"), `"legacy"`) {
		t.Errorf("warnings %q", warnings)
	}
}
