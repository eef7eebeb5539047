package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// build is one agent binary of dist and the platforms of the index that
// carry it.
type build struct {
	name      string // build name of arm/build.sh: amd64, arm64, armv7, armv6
	file      string // path of the binary
	goarch    string // Go architecture, as an AgentRollout names it
	data      []byte
	digest    string // sha256:HEX of data
	layerSize int64  // bytes of the gzipped layer: what a device pulls
	platforms []v1.Platform
}

// known are the builds arm/build.sh makes, in the order of the index.
var known = []struct {
	name, goarch string
	platform     v1.Platform
}{
	{"amd64", "amd64", v1.Platform{OS: "linux", Architecture: "amd64"}},
	{"arm64", "arm64", v1.Platform{OS: "linux", Architecture: "arm64"}},
	{"armv7", "arm", v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}},
	{"armv6", "arm", v1.Platform{OS: "linux", Architecture: "arm", Variant: "v6"}},
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

func knownPlatforms() string {
	var s []string
	for _, k := range known {
		s = append(s, platformString(k.platform))
	}
	return strings.Join(s, ", ")
}

// parsePlatforms parses --platforms into the set of build names whose
// platform is asked for (armv7 stands for linux/arm/v7, armv6 for
// linux/arm/v6), in the order given.
func parsePlatforms(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		p := strings.TrimSpace(part)
		if p == "" {
			continue
		}
		norm := strings.ToLower(p)
		norm = strings.TrimSuffix(norm, "/v8") // linux/arm64/v8 is linux/arm64
		found := ""
		for _, k := range known {
			if norm == platformString(k.platform) || norm == k.name || norm == "linux/"+k.name {
				found = k.name
			}
		}
		if found == "" {
			return nil, usagef("--platforms: unknown platform %q: want some of %s", p, knownPlatforms())
		}
		if !slices.Contains(out, found) {
			out = append(out, found)
		}
	}
	if len(out) == 0 {
		return nil, usagef("--platforms %q names no platform: want some of %s", s, knownPlatforms())
	}
	return out, nil
}

func agentFile(dist, name string) string { return filepath.Join(dist, "fleet-agent-linux-"+name) }

func exists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// selectBuilds decides which dist files go into the image under which
// platforms, reads them and checks them against SHA256SUMS.
func selectBuilds(o options) ([]*build, error) {
	if o.armBuild != "" && o.armBuild != "armv6" && o.armBuild != "armv7" {
		return nil, usagef("--arm-build %q: want armv6 or armv7", o.armBuild)
	}
	if st, err := os.Stat(o.dist); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--dist %s: not a directory: run `make arm` first (it writes dist/)", o.dist)
	}
	explicit := o.platforms != ""
	var want []string
	if explicit {
		var err error
		if want, err = parsePlatforms(o.platforms); err != nil {
			return nil, err
		}
	} else {
		for _, k := range known {
			if exists(agentFile(o.dist, k.name)) {
				want = append(want, k.name)
			}
		}
		if o.armBuild != "" || slices.Contains(want, "armv6") {
			// Both arm platforms carry the one arm build.
			want = appendMissing(want, "armv7", "armv6")
		}
		if len(want) == 0 {
			return nil, fmt.Errorf("no agent build in %s (fleet-agent-linux-{amd64,arm64,armv7,armv6}): run `make arm` first", o.dist)
		}
	}
	plan, err := planBuilds(o, want)
	if err != nil {
		return nil, err
	}
	if err := readAndVerify(o.dist, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

func appendMissing(s []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(s, n) {
			s = append(s, n)
		}
	}
	return s
}

// planBuilds maps the wanted platforms onto dist files: amd64 and arm64
// carry their own build, both arm platforms the one arm build.
func planBuilds(o options, want []string) ([]*build, error) {
	armBuild := o.armBuild
	if armBuild == "" {
		armBuild = "armv6"
		if !exists(agentFile(o.dist, "armv6")) && exists(agentFile(o.dist, "armv7")) && !slices.Contains(want, "armv6") {
			armBuild = "armv7"
		}
	}
	if armBuild == "armv7" && slices.Contains(want, "armv6") {
		if o.platforms != "" {
			return nil, usagef("--platforms: linux/arm/v6 cannot carry the armv7 build (it does not run on ARMv6): use --arm-build armv6")
		}
		want = slices.DeleteFunc(want, func(s string) bool { return s == "armv6" })
	}
	var plan []*build
	var arm *build
	for _, k := range known {
		if !slices.Contains(want, k.name) {
			continue
		}
		if k.goarch != "arm" {
			plan = append(plan, &build{name: k.name, file: agentFile(o.dist, k.name), goarch: k.goarch, platforms: []v1.Platform{k.platform}})
			continue
		}
		if arm == nil {
			arm = &build{name: armBuild, file: agentFile(o.dist, armBuild), goarch: "arm"}
			plan = append(plan, arm)
		}
		arm.platforms = append(arm.platforms, k.platform)
	}
	return plan, nil
}

// readAndVerify reads each planned file and checks its SHA-256 against
// SHA256SUMS; every problem is reported, not just the first.
func readAndVerify(dist string, plan []*build) error {
	sumsPath := filepath.Join(dist, "SHA256SUMS")
	sums, err := readSums(sumsPath)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range plan {
		data, err := os.ReadFile(b.file)
		if errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: missing (needed for %s): build it with `make arm` (ARCHES=%q)", b.file, platformList(b.platforms), b.name))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", b.file, err))
			continue
		}
		sum := sha256.Sum256(data)
		got := hex.EncodeToString(sum[:])
		base := filepath.Base(b.file)
		want, ok := sums[base]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: %s is not listed in %s: rebuild with `make arm`", b.file, base, sumsPath))
		case want != got:
			errs = append(errs, fmt.Errorf("%s: SHA-256 %s does not match %s, which says %s: the file changed after the build; rebuild with `make arm`", b.file, got, sumsPath, want))
		}
		b.data, b.digest = data, "sha256:"+got
	}
	return errors.Join(errs...)
}

func platformList(ps []v1.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, platformString(p))
	}
	return strings.Join(s, ", ")
}

var sumLineRE = regexp.MustCompile(`^([0-9a-fA-F]{64}) [ *](.+)$`)

// readSums parses a sha256sum file into file name → lower-case hex.
func readSums(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s (written by `make arm` next to the builds): %w", path, err)
	}
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := sumLineRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s line %d: %q is not sha256sum output (HEX  NAME)", path, n, truncate(line))
		}
		sums[filepath.Base(m[2])] = strings.ToLower(m[1])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return sums, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// versionRE is what arm/build.sh accepts as VERSION, which is also a valid
// image tag once it starts with a letter or digit.
var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+~-]*$`)

// stampedVersion returns the schema.Version that -ldflags stamped into a
// Go binary, or "" when there is none.
func stampedVersion(data []byte) string {
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key != "-ldflags" {
			continue
		}
		for _, f := range strings.Fields(s.Value) {
			if v, ok := strings.CutPrefix(f, "github.com/fleetmq/fleet/schema.Version="); ok {
				return v
			}
		}
	}
	return ""
}

// resolveVersion returns --version, else what arm/build.sh wrote to
// DIST/VERSION, else the version stamped into the builds (readable when
// they were built without -trimpath), and refuses builds whose stamped
// version differs.
func resolveVersion(flagVersion, dist string, plan []*build) (string, error) {
	version := flagVersion
	from := "--version"
	if version == "" {
		vf := filepath.Join(dist, "VERSION")
		raw, err := os.ReadFile(vf)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("read %s: %w", vf, err)
		}
		if v := strings.TrimSpace(string(raw)); v != "" {
			version, from = v, vf
		}
	}
	for _, b := range plan {
		v := stampedVersion(b.data)
		if v == "" {
			continue
		}
		if version == "" {
			version, from = v, b.file
			continue
		}
		if v != version {
			return "", fmt.Errorf("%s is version %s but %s says %s: build every agent with one VERSION (`make arm VERSION=...`)", b.file, v, from, version)
		}
	}
	if version == "" {
		return "", usagef("--version is required: %s has no VERSION and no version is stamped into the builds (build them with `make arm VERSION=v1.4.0`)", dist)
	}
	if !versionRE.MatchString(version) || len(version) > 128 {
		return "", usagef("%s %q: want a release such as v1.4.0 ([A-Za-z0-9][A-Za-z0-9._+~-]*)", from, truncate(version))
	}
	return version, nil
}
