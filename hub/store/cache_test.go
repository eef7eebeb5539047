package store

import (
	"errors"
	"testing"
)

// TestWriteCache: cache keys are written and deleted without a revision
// or a watch event, survive a reopen, and nothing but cache keys is
// accepted.
func TestWriteCache(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir})
	ctx := t.Context()
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := DesiredSignatureKey("pi-1")
	if err := s.WriteCache(ctx, map[string][]byte{key: []byte("sig-1"), DesiredSignatureKey("pi-2"): []byte("sig-2")}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteCache(ctx, map[string][]byte{DesiredSignatureKey("pi-2"): nil}); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Revision(ctx); after != rev {
		t.Errorf("revision %d after cache writes, want %d", after, rev)
	}
	for _, bad := range []string{DesiredKey("pi-1"), DesiredSignaturePrefix, "v1/meta/revision"} {
		if err := s.WriteCache(ctx, map[string][]byte{bad: []byte("x")}); err == nil {
			t.Errorf("WriteCache(%q) accepted", bad)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteCache(ctx, map[string][]byte{key: []byte("x")}); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteCache on a closed store = %v, want ErrClosed", err)
	}
	s = openTest(t, Options{Dir: dir})
	got := map[string]string{}
	if err := s.View(ctx, func(tx *Txn) error {
		return tx.Scan(DesiredSignaturePrefix, func(k string, v []byte) error { got[k] = string(v); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[key] != "sig-1" {
		t.Errorf("after reopen: %v, want only %s = sig-1", got, key)
	}
}
