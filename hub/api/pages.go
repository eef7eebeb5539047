package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// A list asked for with limit=N answers at most N items and, when more
// follow, metadata.continue: a token that asks for the next page. The
// token is opaque to clients; inside it is the kind, the label selector,
// the name of the page's last item and the revision the first page was
// read at, signed with a key this server drew when it started (so a
// token it did not issue, or a garbled one, is a 400 naming continue; a
// hub that restarted asks for the list again the same way).
//
// Each page is read from the store as it is when the page is asked for,
// from the name after the previous page's last: an object that exists
// for the whole listing is in exactly one page, in name order; one
// created or deleted between pages may or may not be. Every page carries
// the first page's resourceVersion, so a watch from it replays whatever
// changed during the listing; once the hub's event ring no longer holds
// that revision, the next page is 410 Gone (list again), as a watch from
// it would be.

// pageToken is what a continue token carries.
type pageToken struct {
	// V is the token format, 1.
	V int `json:"v"`
	// Kind is the kind listed.
	Kind string `json:"k"`
	// Selector is the labelSelector of the listing, as given.
	Selector string `json:"s,omitempty"`
	// After is the name of the previous page's last item.
	After string `json:"a"`
	// Rev is the store revision of the first page.
	Rev uint64 `json:"r"`
}

// page is what a list request asks for: Limit 0 is everything.
type page struct {
	Limit int
	// Token is the continue token's content; nil on a first page.
	Token *pageToken
}

// pageMACBytes is how much of the HMAC-SHA256 a token keeps.
const pageMACBytes = 16

func newPageKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("new api server: page token key: %w", err)
	}
	return k, nil
}

// parsePage reads the limit and continue query parameters of a list of
// kind with the label selector sel (as given).
func (s *Server) parsePage(q url.Values, kind, sel string) (page, error) {
	var p page
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, invalidParam("limit", "%q must be a whole number of items, 0 or more (0 is every item)", schema.Truncate(v, 80, "..."))
		}
		p.Limit = n
	}
	v := q.Get("continue")
	if v == "" {
		return p, nil
	}
	tok, err := s.openPageToken(v)
	if err != nil {
		return p, err
	}
	if tok.Kind != kind {
		return p, invalidParam("continue", "the token continues a list of %s, not of %s", tok.Kind, kind)
	}
	if tok.Selector != sel {
		return p, invalidParam("continue", "the token continues a list with labelSelector %q, not %q: ask with the same labelSelector", schema.Truncate(tok.Selector, 80, "..."), schema.Truncate(sel, 80, "..."))
	}
	p.Token = tok
	return p, nil
}

// sealPageToken encodes and signs t.
func (s *Server) sealPageToken(t pageToken) string {
	t.V = 1
	body, _ := json.Marshal(t) // a struct of strings and numbers
	mac := hmac.New(sha256.New, s.pageKey)
	mac.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." +
		base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:pageMACBytes])
}

// openPageToken checks and decodes a continue token.
func (s *Server) openPageToken(v string) (*pageToken, error) {
	bad := func(why string) error {
		return invalidParam("continue", "%s: pass the metadata.continue of the previous page as is, or list again without continue", why)
	}
	b64, m64, ok := strings.Cut(v, ".")
	if !ok || len(v) > 4096 {
		return nil, bad("not a continue token this hub issued")
	}
	body, err1 := base64.RawURLEncoding.DecodeString(b64)
	got, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return nil, bad("the token is garbled")
	}
	mac := hmac.New(sha256.New, s.pageKey)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)[:pageMACBytes]) {
		return nil, bad("the token was altered or not issued by this hub (or the hub restarted since)")
	}
	var t pageToken
	if err := json.Unmarshal(body, &t); err != nil || t.V != 1 || t.Rev == 0 {
		return nil, bad("the token is garbled")
	}
	return &t, nil
}
