package hatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Render evaluates a value_template against a payload as Home Assistant
// would (value_json is the payload's JSON), for the subset Fleet uses:
//
//	{{ value_json.a.b }}
//	{{ value_json.list | length }}
//	{{ value_json.list | selectattr('k') | list | length }}
//	{{ value_json.list | rejectattr('k', 'eq', 'v') | list | length == 0 }}
//	{{ value_json.list | map(attribute='k') | sum }}
//	{{ value_json.a != 'x' }}
//
// Numbers render as written in the payload (Python's int and float
// print them so), booleans as True and False. Anything outside the subset,
// and a path the payload lacks, is an error.
func Render(template string, payload []byte) (string, error) {
	inner, ok := strings.CutPrefix(strings.TrimSpace(template), "{{")
	if !ok {
		return "", fmt.Errorf("template %q: want {{ … }}", template)
	}
	inner, ok = strings.CutSuffix(inner, "}}")
	if !ok || strings.Contains(inner, "{{") || strings.Contains(inner, "}}") {
		return "", fmt.Errorf("template %q: want exactly one {{ … }}", template)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return "", fmt.Errorf("value_json: %w", err)
	}
	p := &parser{toks: tokenize(inner)}
	v, err := p.expr(root)
	if err != nil {
		return "", fmt.Errorf("template %q: %w", template, err)
	}
	if p.pos != len(p.toks) {
		return "", fmt.Errorf("template %q: unexpected %q", template, p.toks[p.pos])
	}
	return str(v), nil
}

// tokenize splits into identifiers, numbers, 'strings' and symbols.
func tokenize(s string) []string {
	var toks []string
	for i := 0; i < len(s); {
		r := rune(s[i])
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '\'' || r == '"':
			j := strings.IndexByte(s[i+1:], s[i])
			if j < 0 {
				return append(toks, s[i:])
			}
			toks = append(toks, s[i:i+j+2])
			i += j + 2
		case r == '=' || r == '!':
			if i+1 < len(s) && s[i+1] == '=' {
				toks = append(toks, s[i:i+2])
				i += 2
			} else {
				toks = append(toks, s[i:i+1])
				i++
			}
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
			j := i + 1
			number := unicode.IsDigit(r) || r == '-'
			for j < len(s) && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])) || s[j] == '_' || number && s[j] == '.') {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		default:
			toks = append(toks, s[i:i+1])
			i++
		}
	}
	return toks
}

type parser struct {
	toks []string
	pos  int
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) next() string {
	t := p.peek()
	p.pos++
	return t
}

func (p *parser) expect(t string) error {
	if got := p.next(); got != t {
		return fmt.Errorf("want %q, got %q", t, got)
	}
	return nil
}

// expr := pipeline [('==' | '!=') literal]
func (p *parser) expr(root any) (any, error) {
	v, err := p.pipeline(root)
	if err != nil {
		return nil, err
	}
	switch op := p.peek(); op {
	case "==", "!=":
		p.next()
		lit, err := literal(p.next())
		if err != nil {
			return nil, err
		}
		eq := equal(v, lit)
		return eq == (op == "=="), nil
	}
	return v, nil
}

// pipeline := 'value_json' ('.' name)* ('|' filter)*
func (p *parser) pipeline(root any) (any, error) {
	if err := p.expect("value_json"); err != nil {
		return nil, err
	}
	v := root
	for p.peek() == "." {
		p.next()
		name := p.next()
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf(".%s of a %T", name, v)
		}
		if v, ok = m[name]; !ok {
			return nil, fmt.Errorf("value_json has no %q", name)
		}
	}
	for p.peek() == "|" {
		p.next()
		var err error
		if v, err = p.filter(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// filter applies one filter of the subset to v.
func (p *parser) filter(v any) (any, error) {
	name := p.next()
	var args []any
	var kw map[string]any
	if p.peek() == "(" {
		p.next()
		for p.peek() != ")" {
			tok := p.next()
			if p.peek() == "=" {
				p.next()
				val, err := literal(p.next())
				if err != nil {
					return nil, err
				}
				if kw == nil {
					kw = map[string]any{}
				}
				kw[tok] = val
			} else {
				val, err := literal(tok)
				if err != nil {
					return nil, err
				}
				args = append(args, val)
			}
			if p.peek() == "," {
				p.next()
			} else if p.peek() != ")" {
				return nil, fmt.Errorf("filter %s: want , or ), got %q", name, p.peek())
			}
		}
		p.next()
	}
	list, isList := v.([]any)
	switch name {
	case "length":
		if s, ok := v.(string); ok {
			return json.Number(strconv.Itoa(len([]rune(s)))), nil
		}
		if !isList {
			return nil, fmt.Errorf("length of a %T", v)
		}
		return json.Number(strconv.Itoa(len(list))), nil
	case "list":
		if !isList {
			return nil, fmt.Errorf("list of a %T", v)
		}
		return list, nil
	case "sum":
		if !isList {
			return nil, fmt.Errorf("sum of a %T", v)
		}
		return sum(list)
	case "selectattr", "rejectattr":
		if !isList {
			return nil, fmt.Errorf("%s of a %T", name, v)
		}
		return selectAttr(list, args, name == "selectattr")
	case "map":
		attr, ok := kw["attribute"].(string)
		if !isList || !ok || len(args) > 0 {
			return nil, fmt.Errorf("map: want map(attribute='…') of a list")
		}
		out := make([]any, 0, len(list))
		for _, e := range list {
			m, _ := e.(map[string]any)
			val, ok := m[attr]
			if !ok {
				return nil, fmt.Errorf("map: an item has no %q", attr)
			}
			out = append(out, val)
		}
		return out, nil
	}
	return nil, fmt.Errorf("filter %q is outside the subset", name)
}

// selectAttr is selectattr/rejectattr with a truth test (one argument)
// or eq/equalto/== (three).
func selectAttr(list, args []any, keep bool) ([]any, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("selectattr/rejectattr: want an attribute")
	}
	attr, _ := args[0].(string)
	var test func(any) bool
	switch {
	case len(args) == 1:
		test = truthy
	case len(args) == 3 && (args[1] == "eq" || args[1] == "equalto" || args[1] == "=="):
		test = func(v any) bool { return equal(v, args[2]) }
	case len(args) == 3 && (args[1] == "ne" || args[1] == "!="):
		test = func(v any) bool { return !equal(v, args[2]) }
	default:
		return nil, fmt.Errorf("selectattr/rejectattr: want (attr) or (attr, 'eq', value), got %v", args)
	}
	out := []any{}
	for _, e := range list {
		m, _ := e.(map[string]any)
		if test(m[attr]) == keep {
			out = append(out, e)
		}
	}
	return out, nil
}

func literal(tok string) (any, error) {
	switch {
	case len(tok) >= 2 && (tok[0] == '\'' || tok[0] == '"') && tok[len(tok)-1] == tok[0]:
		return tok[1 : len(tok)-1], nil
	case tok == "true" || tok == "True":
		return true, nil
	case tok == "false" || tok == "False":
		return false, nil
	}
	if _, err := strconv.ParseFloat(tok, 64); err == nil {
		return json.Number(tok), nil
	}
	return nil, fmt.Errorf("%q is not a literal", tok)
}

func sum(list []any) (any, error) {
	var total float64
	integral := true
	for _, e := range list {
		n, ok := e.(json.Number)
		if !ok {
			return nil, fmt.Errorf("sum: %v is not a number", e)
		}
		if strings.ContainsAny(string(n), ".eE") {
			integral = false
		}
		f, err := n.Float64()
		if err != nil {
			return nil, fmt.Errorf("sum: %w", err)
		}
		total += f
	}
	if integral {
		return json.Number(strconv.FormatInt(int64(total), 10)), nil
	}
	return json.Number(strconv.FormatFloat(total, 'f', -1, 64)), nil
}

func equal(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		af, _ := an.Float64()
		bf, _ := bn.Float64()
		return af == bf
	}
	return a == b
}

func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case string:
		return v != ""
	case json.Number:
		f, _ := v.Float64()
		return f != 0
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

// str renders a value as Jinja prints it.
func str(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		return v
	case json.Number:
		return string(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
