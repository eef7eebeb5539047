package printers

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/util/jsonpath"
)

// FieldPath names one field of an object as -o json shows it: dotted field
// names and [N] list indexes, such as .status.pods[0].ready; a dot inside a
// name is written \. (.metadata.labels.example\.com/tier). It is the part
// of the JSONPath dialect of -o jsonpath (client-go's, which parses and
// runs it) that names one value: no ranges, filters, wildcards, unions,
// slices or recursive descent.
type FieldPath struct {
	expr string
	path *jsonpath.JSONPath
}

// ParseFieldPath parses a field path, without braces.
func ParseFieldPath(expr string) (*FieldPath, error) {
	if expr == "" {
		return nil, errors.New("the path is empty: want one such as .status.online")
	}
	if expr[0] != '.' && expr[0] != '[' {
		return nil, fmt.Errorf("path %q: want dotted field names, such as .status.online", expr)
	}
	p, err := jsonpath.Parse("field", "{"+expr+"}")
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "unterminated array"):
			return nil, fmt.Errorf("path %q: no ] closes the index", expr)
		case strings.Contains(msg, "array index"):
			return nil, fmt.Errorf("path %q: an index is a number, such as [0]", expr)
		}
		return nil, fmt.Errorf("path %q: %w", expr, err)
	}
	if err := checkFieldPath(expr, p.Root); err != nil {
		return nil, err
	}
	j := jsonpath.New("field")
	if err := j.Parse("{" + expr + "}"); err != nil {
		return nil, fmt.Errorf("path %q: %w", expr, err)
	}
	return &FieldPath{expr: expr, path: j}, nil
}

// checkFieldPath accepts a parsed template that is one action of field
// names and single, non-negative list indexes.
func checkFieldPath(expr string, root *jsonpath.ListNode) error {
	var action *jsonpath.ListNode
	if len(root.Nodes) == 1 {
		action, _ = root.Nodes[0].(*jsonpath.ListNode)
	}
	if action == nil || len(action.Nodes) == 0 {
		return fmt.Errorf("path %q: want dotted field names, such as .status.online", expr)
	}
	for _, n := range action.Nodes {
		switch n := n.(type) {
		case *jsonpath.FieldNode:
			if n.Value == "" {
				return fmt.Errorf("path %q: a field name is empty", expr)
			}
		case *jsonpath.RecursiveNode:
			return fmt.Errorf("path %q: a field name is empty", expr)
		case *jsonpath.ArrayNode:
			start, end, step := n.Params[0], n.Params[1], n.Params[2]
			if !start.Known || start.Value < 0 || !end.Derived || step.Known {
				return fmt.Errorf("path %q: an index is a number, such as [0]", expr)
			}
		default:
			return fmt.Errorf("path %q: want dotted field names, such as .status.online", expr)
		}
	}
	return nil
}

// String is the path as parsed.
func (p *FieldPath) String() string { return p.expr }

// Lookup returns the value at the path in the JSON form of v as text: a
// string without quotes, a number or boolean as JSON writes it, anything
// else as JSON. set is false when the field is missing or null.
func (p *FieldPath) Lookup(v any) (text string, set bool) {
	data, err := decodeJSON(v)
	if err != nil {
		return "", false
	}
	results, err := p.path.FindResults(data)
	if err != nil || len(results) != 1 || len(results[0]) != 1 {
		return "", false
	}
	switch got := results[0][0].Interface().(type) {
	case nil:
		return "", false
	case string:
		return got, true
	case json.Number:
		return got.String(), true
	case bool:
		return strconv.FormatBool(got), true
	default:
		b, _ := json.Marshal(got)
		return string(b), true
	}
}
