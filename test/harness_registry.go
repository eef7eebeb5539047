package test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is an in-memory OCI registry on a loopback port (plain HTTP,
// which agents use for localhost registries), recording every request
// so a test can see when a device pulled.
type Registry struct {
	// Host is host:port, the prefix of image references.
	Host string

	mu   sync.Mutex
	reqs []string // "METHOD /path"
}

// StartRegistry starts a Registry, stopped at the end of the test.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.reqs = append(r.reqs, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// Push uploads the image of a docker/OCI tar (as testimage.Build makes
// it; tag names the image inside) as Host/repo, and returns its
// reference. The pushes' own requests are forgotten.
func (r *Registry) Push(t testing.TB, tarPath, tag, repo string) string {
	t.Helper()
	src, err := name.NewTag(tag)
	if err != nil {
		t.Fatalf("registry push: tag %q: %v", tag, err)
	}
	img, err := tarball.ImageFromPath(tarPath, &src)
	if err != nil {
		t.Fatalf("registry push: read %s: %v", tarPath, err)
	}
	ref := r.Host + "/" + repo
	dst, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatalf("registry push: %q: %v", ref, err)
	}
	if err := remote.Write(dst, img); err != nil {
		t.Fatalf("registry push %s: %v", ref, err)
	}
	r.mu.Lock()
	r.reqs = nil
	r.mu.Unlock()
	return ref
}

// Pulls counts the manifest GETs of repo since the last Push.
func (r *Registry) Pulls(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.reqs {
		if strings.HasPrefix(q, "GET /v2/"+repo+"/manifests/") {
			n++
		}
	}
	return n
}
