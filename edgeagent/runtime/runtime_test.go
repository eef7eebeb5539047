package runtime

import (
	"fmt"
	"testing"
)

// TestImageName: canonical names, the same again from memory, errors
// never remembered, and a memory past its bound still answers right.
func TestImageName(t *testing.T) {
	cases := []struct{ ref, want string }{
		{"nginx", "docker.io/library/nginx:latest"},
		{"nginx:1.25", "docker.io/library/nginx:1.25"},
		{"registry.example.com/fleet/app:1.0.0", "registry.example.com/fleet/app:1.0.0"},
		{"localhost:5000/app", "localhost:5000/app:latest"},
	}
	for range 2 { // parsed, then remembered
		for _, c := range cases {
			if got, err := ImageName(c.ref); err != nil || got != c.want {
				t.Errorf("ImageName(%q) = %q, %v; want %q", c.ref, got, err, c.want)
			}
		}
	}
	for range 2 {
		if got, err := ImageName("Not/Valid"); err == nil {
			t.Errorf("ImageName of an invalid reference = %q, want an error", got)
		}
	}
	for i := range 2*maxImageNames + 10 {
		ref := fmt.Sprintf("app-%d:v%d", i, i)
		if got, err := ImageName(ref); err != nil || got != "docker.io/library/"+ref {
			t.Fatalf("ImageName(%q) = %q, %v", ref, got, err)
		}
	}
	if n := imageNames.n.Load(); n > maxImageNames {
		t.Errorf("%d names remembered, more than %d", n, maxImageNames)
	}
	if got, err := ImageName("nginx"); err != nil || got != "docker.io/library/nginx:latest" {
		t.Errorf("after clearing: %q, %v", got, err)
	}
}

func BenchmarkImageName(b *testing.B) {
	for b.Loop() {
		if _, err := ImageName("registry.example.com/fleet/scale-app:1.0.0"); err != nil {
			b.Fatal(err)
		}
	}
}
