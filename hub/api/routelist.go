package api

import (
	"net/http"
	"slices"
	"sync"
)

// Route is one pattern the API serves, as registered with Handle or
// HandlePublic: the OpenAPI description (openapi.yaml) is tested against
// the list of them.
type Route struct {
	// Pattern is the net/http ServeMux pattern ("/v1/{kind}/{name}").
	Pattern string
	// Methods are the methods a Methods handler dispatches, sorted (GET
	// also answers HEAD); nil for another handler, which takes any
	// method (the API's 404 answer at "/").
	Methods []string
	// Public is set for a route registered with HandlePublic: no bearer
	// token is asked for.
	Public bool
}

// routeList records the routes in the order they are registered.
type routeList struct {
	mu     sync.Mutex
	routes []Route
}

func (l *routeList) add(pattern string, h http.Handler, public bool) {
	r := Route{Pattern: pattern, Public: public}
	if m, ok := h.(Methods); ok {
		for method := range m {
			r.Methods = append(r.Methods, method)
		}
		slices.Sort(r.Methods)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.routes = append(l.routes, r)
}

// Routes lists every route registered so far, in registration order:
// the API's own and those the hub, its requests to devices and the
// dashboard add.
func (s *Server) Routes() []Route {
	s.registered.mu.Lock()
	defer s.registered.mu.Unlock()
	out := make([]Route, len(s.registered.routes))
	for i, r := range s.registered.routes {
		r.Methods = slices.Clone(r.Methods)
		out[i] = r
	}
	return out
}
