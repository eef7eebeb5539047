package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/fleetmq/fleet/schema"
)

// Reasons the hub puts in schema.Status.Reason.
const (
	ReasonBadRequest       = "BadRequest"
	ReasonInvalid          = "Invalid"
	ReasonUnauthorized     = "Unauthorized"
	ReasonForbidden        = "Forbidden"
	ReasonNotFound         = "NotFound"
	ReasonConflict         = "Conflict"
	ReasonAlreadyExists    = "AlreadyExists"
	ReasonTooLarge         = "RequestEntityTooLarge"
	ReasonMethodNotAllowed = "MethodNotAllowed"
	ReasonExpired          = "Expired"
	ReasonInternalError    = "InternalError"
)

// APIError is an error answer of the hub: its schema.Status.
type APIError struct {
	Status schema.Status
}

// Error is the hub's message, with the field list of each invalid object
// one field per line, followed by every field detail the message does not
// already spell out.
func (e *APIError) Error() string {
	msg := e.Status.Message
	if msg == "" {
		msg = strings.TrimSpace(fmt.Sprintf("%d %s", e.Status.Code, e.Status.Reason))
	}
	var missing []string
	for _, d := range e.Status.Details {
		if !covered(msg, d) {
			missing = append(missing, d.String())
		}
	}
	var b strings.Builder
	for i, line := range strings.Split(msg, "\n") {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(bulletFields(line))
	}
	if len(missing) > 0 {
		out := strings.TrimRight(b.String(), ": ")
		b.Reset()
		b.WriteString(out + ":")
		for _, d := range missing {
			b.WriteString("\n  * ")
			b.WriteString(d)
		}
	}
	return b.String()
}

// objectPrefix is how the hub may start a detail's message: the object it
// is about, `Deployment "web": `.
var objectPrefix = regexp.MustCompile(`^[A-Z][A-Za-z]* "[^"]*": `)

// covered reports whether msg already says what detail d says.
func covered(msg string, d schema.FieldError) bool {
	if strings.Contains(msg, d.String()) {
		return true
	}
	return strings.Contains(msg, d.Field) && strings.Contains(msg, objectPrefix.ReplaceAllString(d.Message, ""))
}

// bulletFields turns `X is invalid: f1: m1; f2: m2` into one field per
// line; other lines are left alone.
func bulletFields(line string) string {
	head, list, ok := strings.Cut(line, " is invalid: ")
	if !ok || !strings.Contains(list, "; ") {
		return line
	}
	return head + " is invalid:\n  * " + strings.ReplaceAll(list, "; ", "\n  * ")
}

// Is makes errors.Is(err, schema.ErrInvalid) true for an Invalid or
// BadRequest answer.
func (e *APIError) Is(target error) bool {
	return target == schema.ErrInvalid && (e.Status.Reason == ReasonInvalid || e.Status.Code == http.StatusBadRequest)
}

func reasonOf(err error) (code int, reason string) {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status.Code, ae.Status.Reason
	}
	return 0, ""
}

// IsNotFound reports whether err is the hub's 404 NotFound.
func IsNotFound(err error) bool {
	code, reason := reasonOf(err)
	return reason == ReasonNotFound || (reason == "" && code == http.StatusNotFound)
}

// IsConflict reports whether err is a 409 for a stale resourceVersion.
func IsConflict(err error) bool {
	code, reason := reasonOf(err)
	return reason == ReasonConflict || (reason == "" && code == http.StatusConflict)
}

// IsAlreadyExists reports whether err is a 409 for creating an object that
// exists.
func IsAlreadyExists(err error) bool {
	_, reason := reasonOf(err)
	return reason == ReasonAlreadyExists
}

// IsInvalid reports whether err is a 400: an invalid object (with field
// details) or a malformed request.
func IsInvalid(err error) bool {
	code, reason := reasonOf(err)
	return reason == ReasonInvalid || reason == ReasonBadRequest || code == http.StatusBadRequest
}

// IsUnauthorized reports whether err is a 401: no token or a wrong one.
func IsUnauthorized(err error) bool {
	code, reason := reasonOf(err)
	return reason == ReasonUnauthorized || code == http.StatusUnauthorized
}

// IsForbidden reports whether err is a 403: the credential may not do
// this (a monitor writing, or reading Secrets).
func IsForbidden(err error) bool {
	code, reason := reasonOf(err)
	return reason == ReasonForbidden || code == http.StatusForbidden
}

// IsExpired reports whether err says a watch's resourceVersion is too old
// (410 Expired): list again and watch from the list's version.
func IsExpired(err error) bool {
	code, reason := reasonOf(err)
	return reason == ReasonExpired || code == http.StatusGone
}

// decodeError turns a non-2xx response into an *APIError. A body that is not
// a Status (a proxy's HTML page, say) becomes the message, shortened.
func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var st schema.Status
	if err := json.Unmarshal(data, &st); err != nil || (st.Kind != "Status" && st.Message == "" && st.Reason == "") {
		st = schema.Status{Message: strings.TrimSpace(shorten(string(data), 300))}
	}
	if st.Code == 0 {
		st.Code = resp.StatusCode
	}
	if st.Reason == "" {
		st.Reason = reasonForCode(resp.StatusCode)
	}
	if st.Message == "" {
		st.Message = fmt.Sprintf("%s %s: %s", resp.Request.Method, resp.Request.URL.Path, http.StatusText(resp.StatusCode))
	}
	if st.Kind == "" {
		st.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"}
	}
	return &APIError{Status: st}
}

func reasonForCode(code int) string {
	switch code {
	case http.StatusBadRequest:
		return ReasonBadRequest
	case http.StatusUnauthorized:
		return ReasonUnauthorized
	case http.StatusForbidden:
		return ReasonForbidden
	case http.StatusNotFound:
		return ReasonNotFound
	case http.StatusMethodNotAllowed:
		return ReasonMethodNotAllowed
	case http.StatusConflict:
		return ReasonConflict
	case http.StatusGone:
		return ReasonExpired
	case http.StatusRequestEntityTooLarge:
		return ReasonTooLarge
	}
	if code >= 500 {
		return ReasonInternalError
	}
	return ""
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
