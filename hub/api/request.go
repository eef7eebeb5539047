package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/schema/selector"
)

// readBody reads at most schema.MaxManifestBytes of the body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > schema.MaxManifestBytes {
		return nil, &http.MaxBytesError{Limit: schema.MaxManifestBytes}
	}
	body := http.MaxBytesReader(w, r.Body, schema.MaxManifestBytes)
	b, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, badRequest("read body: %v", err)
	}
	return b, nil
}

// decodeObjects decodes, defaults and validates a manifest stream and
// reports every invalid field of every object.
func decodeObjects(body []byte) ([]schema.Object, error) {
	objs, err := schema.Decode(body)
	if err != nil {
		return nil, err
	}
	var inv invalidObjects
	for _, o := range objs {
		schema.Default(o)
		if err := schema.Validate(o); err != nil {
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				return nil, err
			}
			inv = append(inv, ve)
		}
	}
	if len(inv) > 0 {
		return nil, inv
	}
	return objs, nil
}

// decodeOne decodes the body of a create or update: one object of kind.
func decodeOne(w http.ResponseWriter, r *http.Request, kind string) (schema.Object, error) {
	body, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	objs, err := decodeObjects(body)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, badRequest("want exactly one object in the body, got %d: use POST /v1/apply for several", len(objs))
	}
	o := objs[0]
	if got := o.GetTypeMeta().Kind; got != kind {
		return nil, &schema.ValidationError{Kind: got, Name: o.GetMetadata().Name, Errors: []schema.FieldError{
			{Field: "kind", Message: "must be " + strconv.Quote(kind) + " on this path, got " + strconv.Quote(got)},
		}}
	}
	return o, nil
}

// kindOf resolves the {kind} path segment ("devices") to a kind.
func kindOf(r *http.Request) (string, error) {
	res := r.PathValue("kind")
	kind, ok := store.KindForResource(res)
	if !ok {
		return "", notFound("no resource %q: want %s", schema.Truncate(res, 80, "..."), strings.Join(store.Resources(), ", "))
	}
	return kind, nil
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), store.ErrNotFound)
}

// dryRun parses ?dryRun=server.
func dryRun(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("dryRun"); v {
	case "":
		return false, nil
	case "server", "All":
		return true, nil
	default:
		return false, invalidParam("dryRun", "unsupported value %q: want \"server\"", v)
	}
}

// invalidParam is a 400 Invalid naming a query parameter.
func invalidParam(name, format string, args ...any) error {
	return &schema.ValidationError{Errors: []schema.FieldError{{Field: name, Message: fmt.Sprintf(format, args...)}}}
}

// ParseSelector parses the labelSelector query parameter of a route added
// with Handle, as the list routes do: the Kubernetes label-selector syntax
// (hub/selector), "" for everything. Its error answers 400 Invalid naming
// labelSelector through WriteError.
func ParseSelector(s string) (schema.LabelSelector, error) {
	sel, err := selector.Parse(s)
	if err != nil {
		return schema.LabelSelector{}, invalidParam("labelSelector", "%q: %v", schema.Truncate(s, 80, "..."), err)
	}
	return sel, nil
}

// parseRV parses a resourceVersion query parameter ("" is 0, false).
func parseRV(r *http.Request) (uint64, bool, error) {
	v := r.URL.Query().Get("resourceVersion")
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, invalidParam("resourceVersion", "%q must be a decimal number, as returned by the hub", schema.Truncate(v, 80, "..."))
	}
	return n, true, nil
}
