package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// The page and its assets, embedded in the hub's binary: no CDN, no
// external font, nothing fetched from elsewhere.
//
//go:embed static
var static embed.FS

// ContentSecurityPolicy is sent with the page and its assets: scripts,
// styles and connections only from the hub itself, no inline script, no
// plug-in, no framing. Even a string that slipped into the page as markup
// could not run.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	name  string
	ctype string
	etag  string
	raw   []byte
	gz    []byte // nil when gzip does not make it smaller
}

type assets struct {
	index *asset
	files map[string]*asset
}

func loadAssets() (*assets, error) {
	a := &assets{files: map[string]*asset{}}
	entries, err := fs.ReadDir(static, "static")
	if err != nil {
		return nil, fmt.Errorf("dashboard assets: %w", err)
	}
	for _, e := range entries {
		raw, err := static.ReadFile("static/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("dashboard assets: %w", err)
		}
		as, err := newAsset(e.Name(), raw)
		if err != nil {
			return nil, err
		}
		if e.Name() == "index.html" {
			a.index = as
			continue
		}
		a.files[e.Name()] = as
	}
	if a.index == nil {
		return nil, fmt.Errorf("dashboard assets: no index.html")
	}
	return a, nil
}

func newAsset(name string, raw []byte) (*asset, error) {
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	sum := sha256.Sum256(raw)
	as := &asset{name: name, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, raw: raw}
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if b.Len() < len(raw) {
		as.gz = b.Bytes()
	}
	return as, nil
}

func (a *assets) serveIndex(w http.ResponseWriter, r *http.Request) {
	a.index.serve(w, r)
}

func (a *assets) serveFile(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files[r.PathValue("file")]
	if !ok {
		http.Error(w, "no such file", http.StatusNotFound)
		return
	}
	f.serve(w, r)
}

// serve answers with the file, gzipped when the client takes it, and
// 304 when the client has it already. Clients revalidate every time
// (no-cache): a new hub version is picked up at once.
func (as *asset) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", as.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", as.etag)
	h.Set("Vary", "Accept-Encoding")
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, as.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := as.raw
	if as.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		body = as.gz
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func acceptsGzip(ae string) bool {
	for _, part := range strings.Split(ae, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
