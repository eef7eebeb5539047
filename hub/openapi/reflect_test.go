package openapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleet/schema"
)

type innerT struct {
	N int32 `json:"n"`
}

type embeddedT struct {
	E string `json:"e"`
}

type sampleT struct {
	embeddedT
	Plain    string            `json:"plain"`
	Omitted  string            `json:"omitted,omitempty"`
	Skipped  string            `json:"-"`
	hidden   string            // unexported: not encoded
	Ptr      *innerT           `json:"ptr,omitempty"`
	Inner    innerT            `json:"inner"`
	List     []innerT          `json:"list"`
	Labels   map[string]string `json:"labels,omitempty"`
	When     time.Time         `json:"when"`
	Raw      json.RawMessage   `json:"raw,omitempty"`
	Bytes    []byte            `json:"bytes,omitempty"`
	Count    uint64            `json:"count"`
	Ratio    float64           `json:"ratio"`
	Port     schema.PortRef    `json:"port"`
	Policy   schema.PullPolicy `json:"policy,omitempty"`
	Self     *sampleT          `json:"self,omitempty"`
	NoTagged bool
}

func TestSchemasOfAGoType(t *testing.T) {
	_ = sampleT{}.hidden
	got, err := Schemas([]Root{root[sampleT]("Sample")}, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["OpenapiInnerT"]; !ok {
		t.Fatalf("no schema OpenapiInnerT for a nested type of another package: %s", b)
	}
	props := doc["Sample"].Properties
	want := map[string]string{
		"e":        `{"type":"string"}`,
		"plain":    `{"type":"string"}`,
		"omitted":  `{"type":"string"}`,
		"ptr":      `{"$ref":"#/components/schemas/OpenapiInnerT"}`,
		"inner":    `{"$ref":"#/components/schemas/OpenapiInnerT"}`,
		"list":     `{"items":{"$ref":"#/components/schemas/OpenapiInnerT"},"nullable":true,"type":"array"}`,
		"labels":   `{"additionalProperties":{"type":"string"},"type":"object"}`,
		"when":     `{"format":"date-time","type":"string"}`,
		"raw":      `{"description":"any JSON value"}`,
		"bytes":    `{"format":"byte","type":"string"}`,
		"count":    `{"format":"int64","minimum":0,"type":"integer"}`,
		"ratio":    `{"type":"number"}`,
		"port":     `{"anyOf":[{"type":"string"},{"type":"integer"}]}`,
		"policy":   `{"enum":["IfNotPresent","Always"],"type":"string"}`,
		"self":     `{"$ref":"#/components/schemas/Sample"}`,
		"NoTagged": `{"type":"boolean"}`,
	}
	for name, w := range want {
		g, err := json.Marshal(props[name])
		if err != nil {
			t.Fatal(err)
		}
		if string(g) != w {
			t.Errorf("%s: %s, want %s", name, g, w)
		}
	}
	for name := range props {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected property %s", name)
		}
	}
}

func TestSchemasRefuseWhatJSONCannotSay(t *testing.T) {
	type intKeys struct {
		M map[int]string `json:"m"`
	}
	type fn struct {
		F func() `json:"f"`
	}
	for _, r := range []Root{root[intKeys]("IntKeys"), root[fn]("Fn")} {
		if _, err := Schemas([]Root{r}, ""); err == nil {
			t.Errorf("%s: no error", r.Name)
		}
	}
	// Two types may not take one name.
	_, err := Schemas([]Root{root[innerT]("Same"), root[embeddedT]("Same")}, "")
	if err == nil || !strings.Contains(err.Error(), "Same") {
		t.Errorf("a name taken twice: %v", err)
	}
}

func TestTypedDefault(t *testing.T) {
	var (
		i32  = reflect.TypeFor[*int32]()
		b    = reflect.TypeFor[bool]()
		pull = reflect.TypeFor[schema.PullPolicy]()
		str  = reflect.TypeFor[string]()
	)
	tests := []struct {
		ft   reflect.Type
		def  string
		want any
		ok   bool
	}{
		{i32, "10", int64(10), true},
		{i32, "0400", int64(256), true}, // a file mode, octal
		{i32, "ten", nil, false},
		{b, "false", false, true},
		{pull, "IfNotPresent", "IfNotPresent", true},
		{pull, "Sometimes", nil, false},
		{str, "127.0.0.1 (the pod uses the device's network)", nil, false},
		{str, "", nil, false},
	}
	for _, tt := range tests {
		got, ok := typedDefault(tt.ft, tt.def)
		if ok != tt.ok || got != tt.want {
			t.Errorf("typedDefault(%v, %q) = %v, %t; want %v, %t", tt.ft, tt.def, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSourceDocsFillWhatFieldDocLacks(t *testing.T) {
	got, err := Schemas(Roots(), "../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]struct {
		Description string                    `json:"description"`
		Properties  map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	// schema.Status is outside fielddoc's table; the dashboard's and the
	// API's own answers are in other packages.
	for _, c := range []struct{ schema, field, want string }{
		{"Status", "", "Status is the body of every API error response."},
		{"Status", "code", "Code is the HTTP status code."},
		{"DashboardSession", "staleAfter", "StaleAfter is the hub's --stale-after, in seconds."},
		{"DeviceRekey", "rekeyPending", "RekeyPending is true"},
		{"Deployment", "spec", "Spec says which devices run the pod"}, // from fielddoc
	} {
		d := doc[c.schema].Description
		if c.field != "" {
			d, _ = doc[c.schema].Properties[c.field]["description"].(string)
		}
		if !strings.HasPrefix(d, c.want) {
			t.Errorf("%s.%s: description %q, want it to start %q", c.schema, c.field, d, c.want)
		}
	}
	if _, err := Schemas(Roots(), t.TempDir()); err == nil {
		t.Error("a root without go.mod: no error")
	}
}

// TestSliceOfPointersAdmitsNull: a nil element of a []*T is encoded as
// null, so its items are nullable (the dashboard's history columns).
func TestSliceOfPointersAdmitsNull(t *testing.T) {
	type withGaps struct {
		Values []*uint64 `json:"values"`
		Counts []int32   `json:"counts"`
	}
	got, err := Schemas([]Root{root[withGaps]("WithGaps")}, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]struct {
		Properties map[string]struct {
			Items map[string]any `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	p := doc["WithGaps"].Properties
	if p["values"].Items["nullable"] != true {
		t.Errorf("items of a []*uint64: %v, want nullable", p["values"].Items)
	}
	if _, ok := p["counts"].Items["nullable"]; ok {
		t.Errorf("items of a []int32: %v, want not nullable", p["counts"].Items)
	}
}
