package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// testListFrom: ListRawNamedFrom starts after the name given, in name
// order, stops on ErrStopList, and stays inside its kind's keys.
func testListFrom(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	names := []string{"a", "ab", "b", "d01", "d010", "d02", "z"}
	var objs []schema.Object
	for _, n := range names {
		objs = append(objs, Device(n))
	}
	objs = append(objs, Deployment("zz", "nginx:1"))
	if _, err := s.ApplyAll(ctx, objs, false); err != nil {
		t.Fatal(err)
	}
	page := func(after string, limit int) string {
		var got []string
		_, err := s.ListRawNamedFrom(ctx, schema.KindDevice, after, func(name string, raw []byte) error {
			if len(got) == limit {
				return store.ErrStopList
			}
			got = append(got, name)
			return nil
		})
		if err != nil {
			t.Fatalf("from %q: %v", after, err)
		}
		return strings.Join(got, ",")
	}
	for _, tc := range []struct {
		after string
		limit int
		want  string
	}{
		{"", 3, "a,ab,b"},
		{"", 100, "a,ab,b,d01,d010,d02,z"},
		{"a", 2, "ab,b"},
		{"d01", 100, "d010,d02,z"},
		{"c", 1, "d01"},
		{"z", 100, ""},
	} {
		if got := page(tc.after, tc.limit); got != tc.want {
			t.Errorf("devices after %q, %d: %q, want %q", tc.after, tc.limit, got, tc.want)
		}
	}
}

// testRegisterDevices: RegisterDevices creates the new devices, keeps the
// existing ones, and every device's new token verifies.
func testRegisterDevices(t *testing.T, b Backend) {
	s := open(t, b, store.Options{})
	ctx := ctxT(t)
	old := Device("pi-0001")
	old.Metadata.Labels = map[string]string{"site": "old"}
	if _, err := s.Create(ctx, old, false); err != nil {
		t.Fatal(err)
	}
	devs := make([]*schema.Device, 1200)
	for i := range devs {
		devs[i] = Device(fmt.Sprintf("pi-%04d", i))
	}
	regs, err := s.RegisterDevices(ctx, devs)
	if err != nil || len(regs) != len(devs) {
		t.Fatalf("register: %d, %v", len(regs), err)
	}
	for i, r := range regs {
		want := schema.ActionCreated
		if i == 1 {
			want = schema.ActionUnchanged
		}
		if r.Name != devs[i].Metadata.Name || r.Action != want || !s.VerifyToken(r.Name, r.Token) {
			t.Fatalf("device %d: %+v, want %s, its token verifying", i, r, want)
		}
	}
	got, err := s.Get(ctx, schema.KindDevice, "pi-0001")
	if err != nil || got.GetMetadata().Labels["site"] != "old" {
		t.Errorf("existing device after register: %v, %v: want its labels kept", got, err)
	}
	bad := []*schema.Device{Device("ok-1"), Device("Not_OK")}
	if _, err := s.RegisterDevices(ctx, bad); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("an invalid device: %v, want ErrInvalid", err)
	}
	if _, err := s.Get(ctx, schema.KindDevice, "ok-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ok-1 of a refused batch: %v, want not stored", err)
	}
}
