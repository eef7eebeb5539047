package explain

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Width is the width explain wraps descriptions to.
const Width = 80

// Write prints the target as kubectl explain does: KIND, VERSION, FIELD
// and its ENUM, DESCRIPTION, then FIELDS, with descriptions or,
// recursive, as a tree of names and types.
func Write(w io.Writer, t Target, recursive bool) error {
	var b bytes.Buffer
	r := t.Resource
	fmt.Fprintf(&b, "KIND:       %s\nVERSION:    %s\n\n", r.Kind, schema.APIVersion)
	var desc string
	if t.field == nil {
		desc = r.Doc
		if desc == "" {
			desc = typeDoc(r.Type)
		}
	} else {
		desc = r.writeFieldHeader(&b, *t.field)
	}
	b.WriteString("DESCRIPTION:\n")
	if desc == "" {
		desc = "<empty>"
	}
	Wrap(&b, desc, "    ")
	if st, ok := structOf(t.typ()); ok {
		b.WriteString("\nFIELDS:\n")
		if recursive {
			r.writeFieldTree(&b, st, "  ", []reflect.Type{st})
		} else {
			for i, f := range Fields(st) {
				if i > 0 {
					b.WriteString("\n")
				}
				r.writeFieldLine(&b, f, "  ")
				if enum := enumOf(f.Type); len(enum) > 0 {
					fmt.Fprintf(&b, "  enum: %s\n", strings.Join(enum, ", "))
				}
				if d := r.FieldInfo(f).Doc; d != "" {
					Wrap(&b, d, "    ")
				}
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeFieldHeader writes the FIELD and ENUM lines of a field and returns
// its description: the field's, then, as kubectl does, its object's.
func (r Resource) writeFieldHeader(b *bytes.Buffer, f Field) string {
	info := r.FieldInfo(f)
	req := ""
	if info.Required {
		req = " -required-"
	}
	fmt.Fprintf(b, "FIELD: %s <%s>%s\n", f.Name, typeName(f.Type), req)
	if enum := enumOf(f.Type); len(enum) > 0 {
		b.WriteString("ENUM:\n")
		for _, v := range enum {
			fmt.Fprintf(b, "    %s\n", v)
		}
	}
	b.WriteString("\n")
	desc := info.Doc
	if st, ok := structOf(f.Type); ok {
		if td := typeDoc(st); td != "" {
			desc = strings.TrimSpace(desc + "\n\n" + td)
		}
	}
	return desc
}

// writeFieldLine writes "name\t<type>", marked when required.
func (r Resource) writeFieldLine(b *bytes.Buffer, f Field, indent string) {
	req := ""
	if r.FieldInfo(f).Required {
		req = " -required-"
	}
	fmt.Fprintf(b, "%s%s\t<%s>%s\n", indent, f.Name, typeName(f.Type), req)
}

// writeFieldTree writes the fields of st and, indented, those below them.
// stack holds the structs being written, so a type that contains itself
// is not expanded again.
func (r Resource) writeFieldTree(b *bytes.Buffer, st reflect.Type, indent string, stack []reflect.Type) {
	for _, f := range Fields(st) {
		r.writeFieldLine(b, f, indent)
		if sub, ok := structOf(f.Type); ok && !slices.Contains(stack, sub) {
			r.writeFieldTree(b, sub, indent+"  ", append(stack, sub))
		}
	}
}

// Wrap writes text with every line indented and wrapped at Width.
// Paragraphs (lines) keep their breaks; a line indented in the text (a
// list item, a code block) keeps its indent, and code (a tab) is not
// wrapped.
func Wrap(b *bytes.Buffer, text, indent string) {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		if strings.HasPrefix(line, "\t") {
			b.WriteString(indent + "    " + strings.TrimPrefix(line, "\t") + "\n")
			continue
		}
		trimmed := strings.TrimLeft(line, " ")
		prefix := indent + line[:len(line)-len(trimmed)]
		hang := prefix
		if strings.HasPrefix(trimmed, "- ") {
			hang += "  "
		}
		col := 0
		for i, word := range strings.Fields(trimmed) {
			switch {
			case i == 0:
				b.WriteString(prefix + word)
				col = len(prefix) + len(word)
			case col+1+len(word) > Width:
				b.WriteString("\n" + hang + word)
				col = len(hang) + len(word)
			default:
				b.WriteString(" " + word)
				col += 1 + len(word)
			}
		}
		b.WriteString("\n")
	}
}

// SuggestName returns the name the mistyped word most likely meant, or ""
// when none is close: one that differs only in case, one a few typing
// mistakes away, or the only one that starts with word.
func SuggestName(word string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(n, word) {
			return n
		}
	}
	lw := strings.ToLower(word)
	// A few typing mistakes, fewer in a short word, where any name is a
	// few edits away.
	best, bestDist := "", min(len(word)/3, 3)+1
	for _, n := range names {
		if d := editDistance(lw, strings.ToLower(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, n := range names {
		if len(word) >= 2 && strings.HasPrefix(strings.ToLower(n), lw) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
