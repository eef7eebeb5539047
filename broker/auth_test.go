package broker

import "testing"

func TestStaticAuth(t *testing.T) {
	a := NewStaticAuth()
	dev := Identity{Name: "pi-1", Role: RoleDevice}
	a.Set(dev, "tok")
	ctx := t.Context()
	if id, ok := a.Authenticate(ctx, "pi-1", []byte("tok")); !ok || id != dev {
		t.Fatalf("Authenticate = %v, %v", id, ok)
	}
	for _, tc := range []struct{ user, pass string }{{"pi-1", "tok2"}, {"pi-1", ""}, {"pi-2", "tok"}, {"", ""}} {
		if _, ok := a.Authenticate(ctx, tc.user, []byte(tc.pass)); ok {
			t.Errorf("Authenticate(%q, %q) succeeded", tc.user, tc.pass)
		}
	}
	a.Remove("pi-1")
	if _, ok := a.Authenticate(ctx, "pi-1", []byte("tok")); ok {
		t.Error("removed account authenticates")
	}
	var zero StaticAuth // the zero value works too
	zero.Set(dev, "x")
	if _, ok := zero.Authenticate(ctx, "pi-1", []byte("x")); !ok {
		t.Error("zero StaticAuth")
	}
}
