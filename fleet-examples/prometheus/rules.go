// Package prometheus ships Fleet's Prometheus alert rules
// (fleet-rules.yml, with their promtool unit tests in
// fleet-rules.test.yml) and what the tests need to read them: the rules
// as Go values, and the series a PromQL expression names. Its test runs
// `promtool check rules` and `promtool test rules`, and checks that every
// series a rule reads is one the hub exports.
package prometheus

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"

	"sigs.k8s.io/yaml"
)

// RulesYAML is fleet-rules.yml as shipped.
//
//go:embed fleet-rules.yml
var RulesYAML []byte

// RuleFile is a Prometheus rule file: groups of rules.
type RuleFile struct {
	Groups []Group `json:"groups"`
}

// Group is a named group of rules.
type Group struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is one alerting (or recording) rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ParseRules decodes a rule file; unknown keys are an error.
func ParseRules(data []byte) (RuleFile, error) {
	var f RuleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return RuleFile{}, fmt.Errorf("parse rule file: %w", err)
	}
	return f, nil
}

// Rules returns the shipped rules.
func Rules() (RuleFile, error) { return ParseRules(RulesYAML) }

// Marshal encodes a rule file as YAML, as Prometheus loads it.
func (f RuleFile) Marshal() ([]byte, error) { return yaml.Marshal(f) }

// Alerts returns every alerting rule, in file order.
func (f RuleFile) Alerts() []Rule {
	var out []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// seriesName matches the metric names Fleet's expressions use: the hub's
// own (fleet_…), the Go and process collectors' (go_…, process_…) and
// Prometheus' own up. Label names, functions and keywords never start
// that way.
var (
	seriesName     = regexp.MustCompile(`\b(?:(?:fleet|go|process)_[a-zA-Z0-9_]+|up)\b`)
	seriesSelector = regexp.MustCompile(`\b(?:(?:fleet|go|process)_[a-zA-Z0-9_]+|up)\b(?:\{[^}]*\})?`)
)

// Series returns the distinct metric names expr reads, sorted.
func Series(expr string) []string {
	out := seriesName.FindAllString(expr, -1)
	slices.Sort(out)
	return slices.Compact(out)
}

// Selectors returns the distinct series selectors of expr (a name with
// its label matchers, if any), sorted: each one must select at least one
// series of a real hub.
func Selectors(expr string) []string {
	out := seriesSelector.FindAllString(expr, -1)
	slices.Sort(out)
	return slices.Compact(out)
}

// pendingSeries are series the rules may read before the hub exports
// them (work landing in parts). Empty: every series the rules read is one
// the hub exports.
var pendingSeries = []string{}

// Pending reports whether name is in pendingSeries: a series the rules
// may name before the hub exports it.
func Pending(name string) bool { return slices.Contains(pendingSeries, name) }
