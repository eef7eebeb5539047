// Package api is a small API package for fielddoc's tests. It is never
// built.
package api

import "time"

// Kinds.
const (
	KindPing   = "Ping"
	KindWidget = "Widget"
	// KindGhost names no type: it is not a kind.
	KindGhost = "Ghost"
)

// TypeMeta names the schema.
type TypeMeta struct {
	Kind string `json:"kind"` // Kind names the type. Required.
}

// Meta names a stored thing.
type Meta struct {
	// Name is the [Widget]'s name. Required.
	Name string `json:"name"`
}

// Widget is a stored thing.
//
// It has two paragraphs.
type Widget struct {
	TypeMeta `json:",inline"`
	// Metadata names the widget.
	Metadata Meta        `json:"metadata"`
	Spec     *WidgetSpec `json:"spec,omitempty"`
	internal int
	// Skipped is not in JSON.
	Skipped string `json:"-"`
}

// GetMetadata makes Widget a stored object.
func (w *Widget) GetMetadata() *Meta { return &w.Metadata }

// WidgetSpec says what a widget is.
type WidgetSpec struct {
	// Mode says how the widget runs. Defaults to "Fast".
	Mode Mode `json:"mode,omitempty"`
	// Parts are the widget's parts; each a | b.
	Parts []Part `json:"parts"`
	// Labels have no JSON tag.
	Labels map[string]string
	// Next is another widget spec, of the same type.
	Next *WidgetSpec `json:"next,omitempty"`
	// Blob is bytes, which JSON writes as base64.
	Blob []byte `json:"blob,omitempty"`
	// Width and Height are in millimetres. Default: 10.
	Width, Height int
}

// Mode is how a widget runs.
type Mode string

const (
	ModeFast Mode = "Fast"
	ModeSlow Mode = "Slow"
	// modeHidden is not a value users may give.
	modeHidden Mode = "Hidden"
)

// Part is one part.
type Part struct {
	// Name of the part, such as <bolt>.
	Name string `json:"name"`
	// Sub are smaller parts.
	Sub map[string]Part `json:"sub,omitempty"`
}

// Ping is a payload.
type Ping struct {
	TypeMeta `json:",inline"`
	// At is when, an RFC 3339 time.
	At    time.Time `json:"at"`
	Count uint64    `json:"count"`
	Ratio float64   `json:"ratio,omitempty"`
	OK    bool      `json:"ok"`
}
