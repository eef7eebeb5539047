package api

import (
	"fmt"
	"net/http"
)

// verifyAudit handles POST /v1/audit/verify (admin only: it is a write to
// every other role): it checks the audit trail's hash chain end to end
// (store.VerifyAudit) and answers a schema.AuditVerification, 200 whether
// the chain holds or not (ok says which; broken names the first entry
// that breaks it). The verification is itself an audit entry, whose
// detail says how it went.
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request) {
	s.FlushAudit(r.Context(), true)
	v, err := s.store.VerifyAudit(r.Context())
	if err != nil {
		WriteError(w, r, s.log, err)
		return
	}
	detail := fmt.Sprintf("chain intact: %d entries (%d to %d), head %s", v.Entries, v.FirstSeq, v.LastSeq, short(v.Head))
	if v.Broken != nil {
		detail = fmt.Sprintf("chain BROKEN at entry %d: %s", v.Broken.Seq, v.Broken.Reason)
		s.log.Warn("audit trail broken", "seq", v.Broken.Seq, "reason", v.Broken.Reason)
	}
	noteAudit(r, "audit", detail)
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusOK, v)
}

// short is a hash's first 16 digits.
func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
