package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleet/schema"
)

const web = `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
      - name: web
        image: nginx:1.25
`

const dev = `{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":"pi-1","labels":{"site":"lab"}}}`

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func names(srcs []Source) string {
	var n []string
	for _, s := range srcs {
		n = append(n, filepath.Base(s.Name))
	}
	return strings.Join(n, ",")
}

func TestReadFilesDirsAndStdin(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b.yaml", web)
	write(t, dir, "a.json", dev)
	write(t, dir, "c.yml", web)
	write(t, dir, "README.md", "not a manifest")
	write(t, dir, ".hidden.yaml", web)
	write(t, dir, "sub/d.yaml", web)
	single := write(t, t.TempDir(), "one.yaml", web)

	srcs, err := Read([]string{single, dir, "-"}, ReadOptions{Stdin: strings.NewReader(dev)})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(srcs); got != "one.yaml,a.json,b.yaml,c.yml,<stdin>" {
		t.Fatalf("read %s", got)
	}
	if srcs[4].Name != "<stdin>" || string(srcs[4].Data) != dev {
		t.Fatalf("stdin source: %+v", srcs[4])
	}
	srcs, err = Read([]string{dir}, ReadOptions{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(srcs); got != "a.json,b.yaml,c.yml,d.yaml" {
		t.Fatalf("recursive read %s", got)
	}
}

func TestReadErrors(t *testing.T) {
	empty := t.TempDir()
	write(t, empty, "notes.txt", "x")
	big := write(t, t.TempDir(), "big.yaml", strings.Repeat("#", schema.MaxManifestBytes+1))
	for name, tt := range map[string]struct {
		paths []string
		want  string
	}{
		"nothing":      {nil, "no manifest given"},
		"missing file": {[]string{"/nonexistent/app.yaml"}, "/nonexistent/app.yaml"},
		"empty dir":    {[]string{empty}, "no manifest files"},
		"stdin twice":  {[]string{"-", "-"}, "more than once"},
		"too large":    {[]string{big}, "big.yaml: manifest is larger"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Read(tt.paths, ReadOptions{Stdin: strings.NewReader("")})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDecodeNamesFileAndField(t *testing.T) {
	tests := []struct {
		name, content string
		want          []string
	}{
		{"bad name", strings.Replace(web, "name: web", "name: Web_1", 1), []string{"bad.yaml: ", "metadata.name"}},
		{"missing image", strings.Replace(web, "        image: nginx:1.25\n", "", 1), []string{"bad.yaml: ", "spec.template.spec.containers[0].image: required"}},
		{"unknown field", strings.Replace(web, "  name: web", "  name: web\n  colour: blue", 1), []string{"bad.yaml: ", "metadata.colour: unknown field"}},
		{"negative memory", strings.Replace(web, "image: nginx:1.25", "image: nginx:1.25\n        resources: {limits: {memory: -1Mi}}", 1), []string{"bad.yaml: ", "resources.limits.memory", "negative"}},
		{"wrong apiVersion", strings.Replace(web, "fleet/v1", "fleet/v2", 1), []string{"bad.yaml: ", "apiVersion"}},
		{"binary garbage", "\x00\x01\x02\xff", []string{"bad.yaml: ", "not text"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srcs := []Source{{Name: "good.yaml", Data: []byte(web)}, {Name: "bad.yaml", Data: []byte(tt.content)}}
			_, err := Decode(srcs)
			if err == nil {
				t.Fatal("decoded")
			}
			if !errors.Is(err, schema.ErrInvalid) {
				t.Errorf("%v does not wrap schema.ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "good.yaml") {
				t.Errorf("error blames the good file: %v", err)
			}
		})
	}
}

func TestDecodeDefaultsAndFindsDuplicates(t *testing.T) {
	objs, err := Decode([]Source{{Name: "a.yaml", Data: []byte(web + "---\n" + dev)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Ref() != "deployment/web" || objs[1].Ref() != "device/pi-1" || objs[1].Source != "a.yaml" {
		t.Fatalf("objects: %+v", objs)
	}
	if d := objs[0].Object.(*schema.Deployment); d.Spec.Strategy.Type != schema.StrategyAllAtOnce {
		t.Fatalf("not defaulted: %+v", d.Spec)
	}
	_, err = Decode([]Source{{Name: "a.yaml", Data: []byte(web)}, {Name: "b.yaml", Data: []byte(web)}})
	if err == nil || !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "deployment/web is also defined in a.yaml") {
		t.Fatalf("duplicate: %v", err)
	}
	// DecodeNames does not validate: an object that became invalid can
	// still be deleted.
	objs, err = DecodeNames([]Source{{Name: "a.yaml", Data: []byte(strings.Replace(web, "image: nginx:1.25", "image: \"\"", 1))}})
	if err != nil || len(objs) != 1 {
		t.Fatalf("DecodeNames: %v", err)
	}
}

func TestBatches(t *testing.T) {
	srcs := []Source{{Name: "a", Data: []byte(web)}, {Name: "b", Data: []byte(dev)}}
	b := Batches(srcs)
	if len(b) != 1 {
		t.Fatalf("%d batches", len(b))
	}
	objs, err := schema.DecodeManifests(b[0])
	if err != nil || len(objs) != 2 {
		t.Fatalf("batch does not decode to both objects: %v", err)
	}
	pad := strings.Repeat("#", schema.MaxManifestBytes/2)
	big := []Source{{Name: "a", Data: []byte(web + pad)}, {Name: "b", Data: []byte(web + pad)}}
	if got := len(Batches(big)); got != 2 {
		t.Fatalf("%d batches for two half-limit files", got)
	}
}

// TestDecodeErrorListsEveryDocument: when documents fail to decode (an
// unknown field), each one's errors are still one field per line.
func TestDecodeErrorListsEveryDocument(t *testing.T) {
	one := strings.Replace(web, "image: nginx:1.25", "image: nginx:1.25\n        enviroment: []\n        imagePullPolicy: Sometimes", 1)
	two := strings.Replace(strings.Replace(one, "name: web\n", "name: other\n", 1), "enviroment", "comand", 1)
	_, err := Decode([]Source{{Name: "two.yaml", Data: []byte(one + "---\n" + two)}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"document 1: Deployment \"web\" is invalid:\n  * spec.template.spec.containers[0].enviroment: unknown field \"enviroment\", did you mean \"env\"?\n  * spec.template.spec.containers[0].imagePullPolicy:",
		"document 2: Deployment \"other\" is invalid:\n  * spec.template.spec.containers[0].comand: unknown field \"comand\", did you mean \"command\"?\n  * spec.template.spec.containers[0].imagePullPolicy:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks\n%s\n\nerror:\n%s", want, err)
		}
	}
}

func TestDecodeErrorListsOneFieldPerLine(t *testing.T) {
	bad := strings.Replace(strings.Replace(web, "name: web\nspec", "name: Web\nspec", 1), "image: nginx:1.25", "image: \"\"", 1)
	for _, data := range []string{bad, bad + "---\n" + strings.Replace(bad, "name: Web\n", "name: Other\n", 1)} {
		_, err := Decode([]Source{{Name: "bad.yaml", Data: []byte(data)}})
		var fe *FileError
		if !errors.As(err, &fe) || fe.File != "bad.yaml" || !errors.Is(err, schema.ErrInvalid) {
			t.Fatalf("got %#v", err)
		}
		want := `Deployment "Web" is invalid:
  * metadata.name: "Web" must be a DNS-1123 label`
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "\n  * spec.template.spec.containers[0].image: required") {
			t.Fatalf("error:\n%s", err)
		}
	}
}
