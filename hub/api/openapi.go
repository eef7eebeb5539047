package api

import (
	_ "embed" // the OpenAPI description
	"fmt"
	"net/http"
	"sync"

	"sigs.k8s.io/yaml"
)

// The OpenAPI 3.0 description of the hub's HTTP API: every route, its
// parameters, bodies and answers. openapi.yaml is generated: edit
// openapi-paths.yaml (the routes, by hand) or the Go types in schema/
// (the component schemas, by reflection), then run
//
//	go generate ./hub/api/
//
// Tests in hub/openapi and hub fail when the file is stale, when a
// registered route or method is not described (or a described one is
// not registered), or when a JSON field of a Go type is missing.
//
//go:generate go run ../openapi/gen -src openapi-paths.yaml -out openapi.yaml -root ../..

//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON is the description as JSON, converted on first use.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	b, err := yaml.YAMLToJSON(openAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("convert the OpenAPI description to JSON: %w", err)
	}
	return b, nil
})

// OpenAPIYAML returns the OpenAPI description the hub serves, as YAML.
func OpenAPIYAML() []byte { return append([]byte(nil), openAPIYAML...) }

// OpenAPIJSON returns the OpenAPI description the hub serves, as JSON.
func OpenAPIJSON() ([]byte, error) {
	b, err := openAPIJSON()
	return append([]byte(nil), b...), err
}

// openAPIRoutes serves the description to every role: it holds no
// data, only what the routes are (the source says as much), but it is
// behind a token like the rest of the API.
func (s *Server) openAPIRoutes() {
	s.Handle("/v1/openapi.yaml", methods{http.MethodGet: func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openAPIYAML)
	}})
	s.Handle("/v1/openapi.json", methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) {
		b, err := openAPIJSON()
		if err != nil {
			WriteError(w, r, s.log, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}})
}
