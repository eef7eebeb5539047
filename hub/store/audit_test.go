package store

import (
	"fmt"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

func appendAudit(t *testing.T, s *Store, n int, actor string) {
	t.Helper()
	for i := range n {
		if _, err := s.AppendAudit(t.Context(), schema.AuditEntry{Actor: actor, Action: "create", Object: fmt.Sprintf("devices/d%d", i), Result: schema.AuditOK}); err != nil {
			t.Fatal(err)
		}
	}
}

func seqs(t *testing.T, s *Store, q AuditQuery) []uint64 {
	t.Helper()
	es, err := s.Audit(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// TestAuditBoundedAndDurable: the store keeps the newest AuditLimit
// entries, deleting the oldest as it appends; the trail and its numbering
// survive a reopen; a lower limit trims on the next append; appends do
// not move the store revision.
func TestAuditBoundedAndDurable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, GCInterval: -1, AuditLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.Revision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	appendAudit(t, s, 12, "admin")
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[8 9 10 11 12]" {
		t.Fatalf("after 12 appends with limit 5: %s", got)
	}
	if now, _ := s.Revision(t.Context()); now != rev {
		t.Errorf("audit appends moved the revision from %d to %d", rev, now)
	}
	if got := fmt.Sprint(seqs(t, s, AuditQuery{Limit: 2})); got != "[11 12]" {
		t.Errorf("limit 2: %s", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(Options{Dir: dir, GCInterval: -1, AuditLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[8 9 10 11 12]" {
		t.Fatalf("after reopen: %s", got)
	}
	appendAudit(t, s, 1, "viewer")
	if got := fmt.Sprint(seqs(t, s, AuditQuery{})); got != "[11 12 13]" {
		t.Fatalf("after reopen with limit 3 and one append: %s", got)
	}
	if got := fmt.Sprint(seqs(t, s, AuditQuery{Actor: "viewer"})); got != "[13]" {
		t.Errorf("actor viewer: %s", got)
	}
	es, err := s.Audit(t.Context(), AuditQuery{Actor: "viewer"})
	if err != nil || es[0].Time.IsZero() || es[0].Object != "devices/d0" {
		t.Errorf("entry: %+v %v", es, err)
	}
	if got := fmt.Sprint(seqs(t, s, AuditQuery{Since: es[0].Time})); got != "[13]" {
		t.Errorf("since the newest: %s", got)
	}
}

// BenchmarkAppendAudit: one synced append, trimming at the limit.
func BenchmarkAppendAudit(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), GCInterval: -1, AuditLimit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := schema.AuditEntry{Actor: "admin", Role: "admin", Source: "127.0.0.1", Action: "apply", Result: schema.AuditOK, Detail: "deployments/web configured"}
	for b.Loop() {
		if _, err := s.AppendAudit(b.Context(), e); err != nil {
			b.Fatal(err)
		}
	}
}
