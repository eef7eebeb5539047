package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// Reasons in schema.Status.Reason.
const (
	ReasonBadRequest         = "BadRequest"
	ReasonInvalid            = "Invalid"
	ReasonUnauthorized       = "Unauthorized"
	ReasonForbidden          = "Forbidden"
	ReasonNotFound           = "NotFound"
	ReasonMethodNotAllowed   = "MethodNotAllowed"
	ReasonConflict           = "Conflict"
	ReasonAlreadyExists      = "AlreadyExists"
	ReasonExpired            = "Expired"
	ReasonTooLarge           = "RequestEntityTooLarge"
	ReasonInternalError      = "InternalError"
	ReasonServiceUnavailable = "ServiceUnavailable"
)

// errBadRequest marks a malformed request (query parameters, body that is
// not one object…).
var errBadRequest = errors.New("bad request")

// errForbidden marks a request the credential may not make.
var errForbidden = errors.New("forbidden")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// invalidObjects carries the validation errors of every object of one
// request, so the 400 lists every invalid field.
type invalidObjects []*schema.ValidationError

func (e invalidObjects) Error() string {
	msgs := make([]string, len(e))
	for i, ve := range e {
		msgs[i] = ve.Error()
	}
	return strings.Join(msgs, "\n")
}

func (e invalidObjects) Is(target error) bool { return target == schema.ErrInvalid }

func (e invalidObjects) details() []schema.FieldError {
	var out []schema.FieldError
	for _, ve := range e {
		for _, fe := range ve.Errors {
			if len(e) > 1 && (ve.Kind != "" || ve.Name != "") {
				fe.Message = fmt.Sprintf("%s %q: %s", ve.Kind, ve.Name, fe.Message)
			}
			out = append(out, fe)
		}
	}
	return out
}

// NewStatus builds an error body.
func NewStatus(code int, reason, message string, details []schema.FieldError) schema.Status {
	return schema.Status{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "Status"},
		Code:     code, Reason: reason, Message: message, Details: details,
	}
}

// StatusFor maps an error to its HTTP answer: schema.ErrInvalid is 400
// with every invalid field, the store's sentinels are 404, 409 and 410, a
// body over the limit is 413; anything else is a 500.
func StatusFor(err error) schema.Status {
	var (
		mbe *http.MaxBytesError
		ve  *schema.ValidationError
		inv invalidObjects
	)
	switch {
	case errors.As(err, &mbe):
		return NewStatus(http.StatusRequestEntityTooLarge, ReasonTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", mbe.Limit), nil)
	case errors.Is(err, store.ErrTooLarge):
		return NewStatus(http.StatusRequestEntityTooLarge, ReasonTooLarge,
			"the objects are too large to store in one transaction: apply them in smaller manifests", nil)
	case errors.As(err, &inv):
		return NewStatus(http.StatusBadRequest, ReasonInvalid, err.Error(), inv.details())
	case errors.As(err, &ve):
		if all := schema.ValidationErrors(err); len(all) > 1 { // several bad documents
			return NewStatus(http.StatusBadRequest, ReasonInvalid, err.Error(), invalidObjects(all).details())
		}
		return NewStatus(http.StatusBadRequest, ReasonInvalid, err.Error(), ve.Errors)
	case errors.Is(err, schema.ErrInvalid):
		return NewStatus(http.StatusBadRequest, ReasonInvalid, err.Error(), nil)
	case errors.Is(err, errBadRequest):
		return NewStatus(http.StatusBadRequest, ReasonBadRequest, err.Error(), nil)
	case errors.Is(err, errForbidden):
		return NewStatus(http.StatusForbidden, ReasonForbidden, err.Error(), nil)
	case errors.Is(err, store.ErrNotFound):
		return NewStatus(http.StatusNotFound, ReasonNotFound, err.Error(), nil)
	case errors.Is(err, store.ErrAlreadyExists):
		return NewStatus(http.StatusConflict, ReasonAlreadyExists, err.Error(), nil)
	case errors.Is(err, store.ErrConflict):
		return NewStatus(http.StatusConflict, ReasonConflict, err.Error(), nil)
	case errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrWatcherTooSlow):
		return NewStatus(http.StatusGone, ReasonExpired, err.Error()+": list again", nil)
	case errors.Is(err, store.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return NewStatus(http.StatusServiceUnavailable, ReasonServiceUnavailable, err.Error(), nil)
	}
	return NewStatus(http.StatusInternalServerError, ReasonInternalError, err.Error(), nil)
}

// WriteError answers with the Status for err; a 500 is logged.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	st := StatusFor(err)
	if st.Code >= 500 && log != nil {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", st.Code, "err", err)
	}
	WriteStatus(w, st)
}

// WriteStatus writes a Status body with its code.
func WriteStatus(w http.ResponseWriter, st schema.Status) {
	if st.Code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet"`)
	}
	WriteJSON(w, st.Code, st)
}

// WriteJSON writes v as JSON with the code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(NewStatus(code, ReasonInternalError, "encode response: "+err.Error(), nil))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
