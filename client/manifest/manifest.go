// Package manifest reads the manifests given to `fleet apply|delete|diff
// -f` (files, directories, stdin), decodes and validates them with the
// schema package so that errors name the file and the field, batches them
// for the hub, and renders the comparable form `fleet diff` shows.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fleetmq/fleet/schema"
)

// Stdin is the -f value that reads standard input.
const Stdin = "-"

// Extensions of the files read from a directory.
var Extensions = []string{".yaml", ".yml", ".json"}

// Source is the content of one manifest file.
type Source struct {
	// Name is the file's path as given (joined with its directory), or
	// "<stdin>".
	Name string
	Data []byte
}

// ReadOptions tune Read.
type ReadOptions struct {
	// Recursive descends into subdirectories of a directory.
	Recursive bool
	// Stdin is read for "-"; nil means os.Stdin.
	Stdin io.Reader
}

// Read reads the -f arguments in order: a file; a directory, whose files
// ending in .yaml, .yml or .json are read in lexical order; or "-" for
// standard input (at most once). A file larger than
// schema.MaxManifestBytes is an error.
func Read(paths []string, opts ReadOptions) ([]Source, error) {
	if len(paths) == 0 {
		return nil, errors.New("no manifest given: pass -f FILE, -f DIR or -f - for standard input")
	}
	var out []Source
	seenStdin := false
	for _, p := range paths {
		if p == Stdin {
			if seenStdin {
				return nil, errors.New("-f - (standard input) given more than once")
			}
			seenStdin = true
			in := opts.Stdin
			if in == nil {
				in = os.Stdin
			}
			data, err := readLimited(in, "<stdin>")
			if err != nil {
				return nil, err
			}
			out = append(out, Source{Name: "<stdin>", Data: data})
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		if !fi.IsDir() {
			src, err := readFile(p)
			if err != nil {
				return nil, err
			}
			out = append(out, src)
			continue
		}
		files, err := dirFiles(p, opts.Recursive)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no manifest files (%s) in the directory", p, strings.Join(Extensions, ", "))
		}
		for _, f := range files {
			src, err := readFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, src)
		}
	}
	return out, nil
}

func readFile(p string) (Source, error) {
	f, err := os.Open(p)
	if err != nil {
		return Source{}, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	data, err := readLimited(f, p)
	if err != nil {
		return Source{}, err
	}
	return Source{Name: p, Data: data}, nil
}

func readLimited(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, schema.MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	if len(data) > schema.MaxManifestBytes {
		return nil, fmt.Errorf("%s: manifest is larger than the %d bytes allowed", name, schema.MaxManifestBytes)
	}
	return data, nil
}

// dirFiles lists the manifest files of dir in lexical order of their path.
func dirFiles(dir string, recursive bool) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(Extensions, strings.ToLower(filepath.Ext(p))) && !strings.HasPrefix(d.Name(), ".") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read manifest directory: %w", err)
	}
	slices.Sort(files)
	return files, nil
}

// Object is a decoded object and the file it came from.
type Object struct {
	schema.Object
	Source string
}

// Ref is "deployment/web", how the CLI names an object.
func (o Object) Ref() string {
	return strings.ToLower(o.GetTypeMeta().Kind) + "/" + o.GetMetadata().Name
}

// Decode decodes, defaults and validates every source with
// schema.DecodeManifests. Errors are prefixed with the source's name and
// returned for every bad file at once; an object defined twice is an error
// too. Errors wrap schema.ErrInvalid.
func Decode(srcs []Source) ([]Object, error) {
	return decode(srcs, schema.DecodeManifests)
}

// DecodeNames decodes sources strictly but does not validate them: enough
// to know the kind and name of each object (for delete).
func DecodeNames(srcs []Source) ([]Object, error) {
	return decode(srcs, schema.Decode)
}

func decode(srcs []Source, fn func([]byte) ([]schema.Object, error)) ([]Object, error) {
	var out []Object
	var errs []error
	where := map[string]string{}
	for _, s := range srcs {
		objs, err := fn(s.Data)
		if err != nil {
			errs = append(errs, &FileError{File: s.Name, Err: err, msg: readable(s.Data, err)})
			continue
		}
		for _, o := range objs {
			obj := Object{Object: o, Source: s.Name}
			if prev, ok := where[obj.Ref()]; ok {
				errs = append(errs, fmt.Errorf("%s: %w: %s is also defined in %s", s.Name, schema.ErrInvalid, obj.Ref(), prev))
				continue
			}
			where[obj.Ref()] = s.Name
			out = append(out, obj)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Batches joins the sources into as few manifest streams as fit in
// schema.MaxManifestBytes each, keeping their order, so an apply of several
// files is one all-or-nothing request when it can be.
func Batches(srcs []Source) [][]byte {
	const sep = "\n---\n"
	var out [][]byte
	var cur []byte
	for _, s := range srcs {
		if len(cur) > 0 && len(cur)+len(sep)+len(s.Data) > schema.MaxManifestBytes {
			out = append(out, cur)
			cur = nil
		}
		if len(cur) > 0 {
			cur = append(cur, sep...)
		}
		cur = append(cur, bytes.TrimRight(s.Data, "\n")...)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// FileError is a manifest file that does not decode or validate.
type FileError struct {
	File string
	Err  error
	msg  string
}

// Error names the file, then the problem; an object with several invalid
// fields gets one line per field.
func (e *FileError) Error() string {
	msg := e.msg
	if msg == "" {
		msg = e.Err.Error()
	}
	return e.File + ": " + msg
}

func (e *FileError) Unwrap() error { return e.Err }

// readable rewrites the one-line field lists of validation errors in
// err's message as one field per line. schema.DecodeManifests reports the
// errors of several objects as text, so their structure is recovered by
// validating the objects again.
func readable(data []byte, err error) string {
	msg := err.Error()
	ves := schema.ValidationErrors(err)
	var ve *schema.ValidationError
	if objs, derr := schema.Decode(data); derr == nil {
		for _, o := range objs {
			schema.Default(o)
			if errors.As(schema.Validate(o), &ve) {
				ves = append(ves, ve)
			}
		}
	}
	for _, ve := range ves {
		if len(ve.Errors) < 2 {
			continue
		}
		one := ve.Error()
		var b strings.Builder
		b.WriteString(strings.TrimSuffix(one[:len(one)-len(joinFields(ve.Errors))], ": "))
		b.WriteString(":")
		for _, fe := range ve.Errors {
			b.WriteString("\n  * ")
			b.WriteString(fe.String())
		}
		msg = strings.Replace(msg, one, b.String(), 1)
	}
	return msg
}

// joinFields is how schema.ValidationError lists its fields on one line.
func joinFields(errs []schema.FieldError) string {
	parts := make([]string, len(errs))
	for i, fe := range errs {
		parts[i] = fe.String()
	}
	return strings.Join(parts, "; ")
}
