package schema

import (
	"strings"
	"testing"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func agentRollout(mod func(*AgentRollout)) *AgentRollout {
	a := &AgentRollout{
		TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindAgentRollout},
		Metadata: ObjectMeta{Name: "fleet"},
		Spec: AgentRolloutSpec{
			Version:  "v1.4.0",
			Image:    "registry.example.com/fleet/agent:v1.4.0",
			Selector: LabelSelector{MatchLabels: map[string]string{"site": "north"}},
		},
	}
	if mod != nil {
		mod(a)
	}
	Default(a)
	return a
}

func TestValidateAgentRollout(t *testing.T) {
	one := int32(1)
	hundred := int32(100)
	for _, tt := range []struct {
		name string
		mod  func(*AgentRollout)
		want []string // substrings of the error; none: valid
	}{
		{"image only", nil, nil},
		{"digests per arch", func(a *AgentRollout) {
			a.Spec.Artifacts = []AgentArtifact{{Arch: "arm64", Digest: testDigest}, {Arch: "arm", Digest: testDigest, Image: "r.example/agent-arm:v1.4.0"}}
		}, nil},
		{"staged", func(a *AgentRollout) {
			a.Spec.Strategy = Strategy{Type: StrategyStaged, Staged: &Staged{Steps: []StagedStep{{Devices: &one}, {Percent: &hundred}}, FailureThreshold: "1", AutoRollback: true}}
		}, nil},
		{"prerelease", func(a *AgentRollout) { a.Spec.Version = "v1.5.0-rc.1" }, nil},
		{"no version", func(a *AgentRollout) { a.Spec.Version = "" }, []string{"spec.version: required"}},
		{"malformed version", func(a *AgentRollout) { a.Spec.Version = "1.4" }, []string{`spec.version: "1.4": want a release such as v1.4.0`}},
		{"version with leading zero", func(a *AgentRollout) { a.Spec.Version = "v1.04.0" }, []string{"spec.version"}},
		{"no artifact", func(a *AgentRollout) { a.Spec.Image = "" }, []string{"spec: set spec.image"}},
		{"bad image", func(a *AgentRollout) { a.Spec.Image = "not an image!" }, []string{"spec.image:"}},
		{"unknown arch", func(a *AgentRollout) { a.Spec.Artifacts = []AgentArtifact{{Arch: "mips", Digest: testDigest}} }, []string{`spec.artifacts[0].arch: unsupported value "mips"`}},
		{"arch twice", func(a *AgentRollout) {
			a.Spec.Artifacts = []AgentArtifact{{Arch: "arm64", Digest: testDigest}, {Arch: "arm64", Digest: testDigest}}
		}, []string{`spec.artifacts[1].arch: "arm64" is named twice`}},
		{"bad digest", func(a *AgentRollout) { a.Spec.Artifacts = []AgentArtifact{{Arch: "arm64", Digest: "sha256:XYZ"}} }, []string{"spec.artifacts[0].digest"}},
		{"digest without any image", func(a *AgentRollout) {
			a.Spec.Image = ""
			a.Spec.Artifacts = []AgentArtifact{{Arch: "arm64", Digest: testDigest}}
		}, []string{"spec.artifacts[0].image: required"}},
		{"rolling update", func(a *AgentRollout) { a.Spec.Strategy.Type = StrategyRollingUpdate }, []string{"spec.strategy.type"}},
		{"staged without steps", func(a *AgentRollout) { a.Spec.Strategy = Strategy{Type: StrategyStaged} }, []string{"spec.strategy.staged: required"}},
		{"bad selector", func(a *AgentRollout) { a.Spec.Selector.MatchLabels = map[string]string{"bad key!": "x"} }, []string{"spec.selector"}},
		{"bad name", func(a *AgentRollout) { a.Metadata.Name = "Fleet_1" }, []string{"metadata.name"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(agentRollout(tt.mod))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error with %q, got none", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCheckAgentSkew(t *testing.T) {
	for _, tt := range []struct {
		hub, agent string
		want       string // substring of the error; "": allowed
	}{
		{"v1.4.0", "v1.4.0", ""},
		{"v1.4.2", "v1.4.0", ""},
		{"v1.4.0", "v1.3.9", ""},
		{"v1.4.0", "v1.2.0", ""},
		{"v1.4.0", "v1.1.9", "below the version-skew policy"},
		{"v1.4.0", "v1.5.0", "unknown version v1.5.0: it is newer than this hub"},
		{"v1.4.0", "v1.4.1", "unknown version"},
		{"v1.4.0", "v1.4.0-rc.1", ""},
		{"v1.4.0-rc.1", "v1.4.0", "unknown version"},
		{"v1.4.0", "v2.0.0", "another major release"},
		{"v1.1.0", "v1.0.0", ""},
		{"v1.4.0", "1.4", "spec.version:"},
		{"dev", "v9.9.9", ""},
	} {
		err := CheckAgentSkew(tt.hub, tt.agent)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("hub %s, agent %s: want allowed, got %v", tt.hub, tt.agent, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("hub %s, agent %s: want an error with %q, got %v", tt.hub, tt.agent, tt.want, err)
		}
	}
}

func TestAgentArtifactFor(t *testing.T) {
	a := agentRollout(func(a *AgentRollout) {
		a.Spec.Artifacts = []AgentArtifact{{Arch: "arm64", Digest: testDigest}, {Arch: "arm", Digest: testDigest, Image: "r.example/agent-arm:v1.4.0"}}
	})
	for _, tt := range []struct {
		arch, image, digest string
	}{
		{"arm64", a.Spec.Image, testDigest},
		{"arm", "r.example/agent-arm:v1.4.0", testDigest},
		{"amd64", a.Spec.Image, ""},
	} {
		got, ok := a.Spec.ArtifactFor(tt.arch)
		if !ok || got.Image != tt.image || got.Digest != tt.digest || got.Version != "v1.4.0" {
			t.Errorf("%s: got %+v %v, want image %s digest %q", tt.arch, got, ok, tt.image, tt.digest)
		}
	}
	a.Spec.Image = ""
	if got, ok := a.Spec.ArtifactFor("amd64"); ok {
		t.Errorf("amd64 without spec.image: got %+v, want none", got)
	}
}

func TestAgentVersionCompare(t *testing.T) {
	order := []string{"v0.9.0", "v1.0.0-rc.1", "v1.0.0", "v1.0.1", "v1.2.0", "v2.0.0"}
	for i := range order {
		for j := range order {
			a, _ := ParseAgentVersion(order[i])
			b, _ := ParseAgentVersion(order[j])
			if got, want := a.Compare(b), sign(i-j)*min(1, max(i-j, j-i)); got != want {
				t.Errorf("%s vs %s: %d, want %d", order[i], order[j], got, want)
			}
		}
	}
}
