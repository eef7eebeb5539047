package schema

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// deploymentWithStrategy is a valid Deployment whose spec.strategy is the
// given YAML flow mapping.
func deploymentWithStrategy(strategy string) string {
	return `
apiVersion: fleet/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {role: kiosk}}
  strategy: ` + strategy + `
  template:
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
`
}

func TestStagedStrategyValidation(t *testing.T) {
	type fieldErr struct{ field, msg string }
	tests := []struct {
		name     string
		strategy string
		want     []fieldErr // every error, in order; none for a valid strategy
	}{
		{"issue example", `{type: Staged, staged: {steps: [{devices: 1}, {percent: 10, pause: 10m}, {percent: 50}, {percent: 100}], minReadySeconds: 30, progressDeadlineSeconds: 600, failureThreshold: 5%, autoRollback: true, selectorOrder: [canary=true]}}`, nil},
		{"one step", `{type: Staged, staged: {steps: [{percent: 100}]}}`, nil},
		{"count threshold as a number", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: 3}}`, nil},
		{"count threshold as a string", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: "3"}}`, nil},
		{"zero thresholds", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: 0%}}`, nil},
		{"equal steps and a zero pause", `{type: Staged, staged: {steps: [{devices: 2}, {devices: 2, pause: "0"}, {percent: 10}, {percent: 10, pause: 1h30m}, {percent: 100}]}}`, nil},
		{"selector order keys", `{type: Staged, staged: {steps: [{percent: 100}], selectorOrder: [canary, "example.com/ring=0", "site="]}}`, nil},
		{"AllAtOnce and RollingUpdate unchanged", `{type: RollingUpdate, rollingUpdate: {maxUnavailable: "25%"}}`, nil},

		{"staged missing", `{type: Staged}`, []fieldErr{{"spec.strategy.staged", "required when type is \"Staged\""}}},
		{"no steps", `{type: Staged, staged: {autoRollback: true}}`, []fieldErr{{"spec.strategy.staged.steps", "required: at least one step"}}},
		{"never reaches 100%", `{type: Staged, staged: {steps: [{devices: 1}, {percent: 50}]}}`, []fieldErr{{"spec.strategy.staged.steps", "never reaches 100%: the last step, steps[1], stops at 50%"}}},
		{"ends with a device count", `{type: Staged, staged: {steps: [{devices: 1}, {devices: 500}]}}`, []fieldErr{{"spec.strategy.staged.steps", "never reaches 100%: the last step, steps[1], counts 500 devices"}}},
		{"percent over 100", `{type: Staged, staged: {steps: [{percent: 10}, {percent: 150}]}}`, []fieldErr{{"spec.strategy.staged.steps[1].percent", "must be from 1 to 100, got 150"}}},
		{"percent zero", `{type: Staged, staged: {steps: [{percent: 0}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[0].percent", "must be from 1 to 100, got 0"}}},
		{"devices zero", `{type: Staged, staged: {steps: [{devices: 0}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[0].devices", "must be at least 1, got 0"}}},
		{"both devices and percent", `{type: Staged, staged: {steps: [{devices: 1, percent: 5}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[0]", "exactly one of devices and percent, not both"}}},
		{"neither devices nor percent", `{type: Staged, staged: {steps: [{pause: 1m}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[0]", "exactly one of devices"}}},
		{"decreasing percent", `{type: Staged, staged: {steps: [{percent: 50}, {devices: 3}, {percent: 20}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[2].percent", "must not be less than the 50% of steps[0]"}}},
		{"decreasing devices", `{type: Staged, staged: {steps: [{devices: 5}, {devices: 2}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[1].devices", "must not be less than the 5 devices of steps[0]"}}},
		{"bad pause", `{type: Staged, staged: {steps: [{percent: 10, pause: "10"}, {percent: 100, pause: soon}]}}`, []fieldErr{
			{"spec.strategy.staged.steps[0].pause", `"10" is not a duration such as 30s`},
			{"spec.strategy.staged.steps[1].pause", `"soon" is not a duration`},
		}},
		{"negative pause", `{type: Staged, staged: {steps: [{percent: 10, pause: -1m}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[0].pause", `"-1m" must not be negative`}}},
		{"pause as a number", `{type: Staged, staged: {steps: [{percent: 10, pause: 10}, {percent: 100}]}}`, []fieldErr{{"spec.strategy.staged.steps[0].pause", "wrong type: got number, want string"}}},
		{"percent over 100 at the end", `{type: Staged, staged: {steps: [{percent: 150}]}}`, []fieldErr{{"spec.strategy.staged.steps[0].percent", "must be from 1 to 100, got 150"}}},
		{"threshold words", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: some}}`, []fieldErr{{"spec.strategy.staged.failureThreshold", `"some": want a count of devices`}}},
		{"threshold over 100%", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: 101%}}`, []fieldErr{{"spec.strategy.staged.failureThreshold", `"101%": want a whole percentage from 0% to 100%`}}},
		{"threshold fractional percent", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: 2.5%}}`, []fieldErr{{"spec.strategy.staged.failureThreshold", "want a whole percentage"}}},
		{"threshold fractional number", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: 1.5}}`, []fieldErr{{"spec.strategy.staged.failureThreshold", `"1.5": want a count of devices`}}},
		{"threshold negative", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: -1}}`, []fieldErr{{"spec.strategy.staged.failureThreshold", `"-1": want a count`}}},
		{"threshold of the wrong type", `{type: Staged, staged: {steps: [{percent: 100}], failureThreshold: true}}`, []fieldErr{{"spec.strategy.staged.failureThreshold", `wrong type: got boolean, want a count or a percentage such as "5%"`}}},
		{"negative minReadySeconds", `{type: Staged, staged: {steps: [{percent: 100}], minReadySeconds: -5}}`, []fieldErr{{"spec.strategy.staged.minReadySeconds", "must not be negative, got -5"}}},
		{"zero progress deadline", `{type: Staged, staged: {steps: [{percent: 100}], progressDeadlineSeconds: 0}}`, []fieldErr{{"spec.strategy.staged.progressDeadlineSeconds", "must be at least 1, got 0"}}},
		{"deadline not above minReady", `{type: Staged, staged: {steps: [{percent: 100}], minReadySeconds: 60, progressDeadlineSeconds: 60}}`, []fieldErr{{"spec.strategy.staged.progressDeadlineSeconds", "must be greater than minReadySeconds (60), got 60"}}},
		{"minReady above the default deadline", `{type: Staged, staged: {steps: [{percent: 100}], minReadySeconds: 900}}`, []fieldErr{{"spec.strategy.staged.minReadySeconds", "must be less than progressDeadlineSeconds (default 600)"}}},
		{"bad selector order", `{type: Staged, staged: {steps: [{percent: 100}], selectorOrder: ["", "canary!=true", "ring=a b", "-bad"]}}`, []fieldErr{
			{"spec.strategy.staged.selectorOrder[0]", "required: want key=value or key"},
			{"spec.strategy.staged.selectorOrder[1]", `key "canary!"`},
			{"spec.strategy.staged.selectorOrder[2]", `value "a b"`},
			{"spec.strategy.staged.selectorOrder[3]", `key "-bad"`},
		}},
		{"staged with another type", `{type: RollingUpdate, staged: {steps: [{percent: 100}]}}`, []fieldErr{{"spec.strategy.staged", `may only be set when type is "Staged"`}}},
		{"staged with the default type", `{staged: {steps: [{percent: 100}]}}`, []fieldErr{{"spec.strategy.staged", `may only be set when type is "Staged"`}}},
		{"rollingUpdate with Staged", `{type: Staged, rollingUpdate: {maxUnavailable: "1"}, staged: {steps: [{percent: 100}]}}`, []fieldErr{{"spec.strategy.rollingUpdate", `may only be set when type is "RollingUpdate"`}}},
		{"unknown type", `{type: Canary}`, []fieldErr{{"spec.strategy.type", `unsupported value "Canary": want "AllAtOnce", "RollingUpdate" or "Staged"`}}},
		{"unknown step field", `{type: Staged, staged: {steps: [{precent: 10}, {percent: 100}]}}`, []fieldErr{
			{"spec.strategy.staged.steps[0]", "exactly one of devices"},
			{"spec.strategy.staged.steps[0].precent", `did you mean "percent"?`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeManifests([]byte(deploymentWithStrategy(tt.strategy)))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("valid strategy refused: %v", err)
				}
				return
			}
			ves := ValidationErrors(err)
			if len(ves) != 1 {
				t.Fatalf("err = %v, want one validation error", err)
			}
			got := ves[0].Errors
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d: %v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				if got[i].Field != w.field || !strings.Contains(got[i].Message, w.msg) {
					t.Errorf("error %d = %q, want field %s with %q", i, got[i].String(), w.field, w.msg)
				}
			}
		})
	}
}

func TestStagedStepCountsMustStayBounded(t *testing.T) {
	steps := strings.Repeat("{percent: 100}, ", maxStagedSteps) + "{percent: 100}"
	_, err := DecodeManifests([]byte(deploymentWithStrategy(`{type: Staged, staged: {steps: [` + steps + `]}}`)))
	if err == nil || !strings.Contains(err.Error(), "spec.strategy.staged.steps: at most 100 steps, got 101") {
		t.Errorf("err = %v, want the step count refused", err)
	}
}

func TestIntOrPercentJSON(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want IntOrPercent
	}{
		{`3`, "3"}, {`"3"`, "3"}, {`"5%"`, "5%"}, {`1.5`, "1.5"}, {`-2`, "-2"}, {`null`, ""},
	} {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(tt.in), &v); err != nil || v != tt.want {
			t.Errorf("Unmarshal(%s) = %q, %v; want %q", tt.in, v, err, tt.want)
		}
	}
	for _, bad := range []string{`true`, `{}`, `[1]`} {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("Unmarshal(%s) = %q, want an error", bad, v)
		}
	}
	// A count written as a number is stored, and re-encoded, as a string:
	// applying the manifest again changes nothing.
	s := Staged{Steps: []StagedStep{{Percent: ptr[int32](100)}}}
	if err := json.Unmarshal([]byte(`{"steps":[{"percent":100}],"failureThreshold":3}`), &s); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"failureThreshold":"3"`) {
		t.Errorf("Marshal = %s, %v; want the threshold as the string \"3\"", b, err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestStagedAccessors(t *testing.T) {
	s := Staged{
		Steps: []StagedStep{
			{Devices: ptr[int32](1)},
			{Percent: ptr[int32](10), Pause: "10m"},
			{Devices: ptr[int32](5)}, // fewer than 10% of 200: the running maximum holds
			{Percent: ptr[int32](50)},
			{Percent: ptr[int32](100), Pause: "1h"},
		},
		SelectorOrder: []string{"canary=true", "ring"},
	}
	for _, tt := range []struct{ step, targeted, want int }{
		{0, 200, 1}, {1, 200, 20}, {2, 200, 20}, {3, 200, 100}, {4, 200, 200},
		{0, 0, 0}, {1, 0, 0}, {4, 0, 0},
		{1, 7, 1}, // 10% of 7 rounds up to 1
		{3, 7, 5}, // 50% of 7 rounds up to 4, below the 5 devices of step 2
		{3, 9, 5}, // 50% of 9 rounds up to 5
		{0, 1, 1}, {1, 1, 1},
		{99, 200, 200}, {-1, 200, 0},
	} {
		if got := s.StepTarget(tt.step, tt.targeted); got != tt.want {
			t.Errorf("StepTarget(%d, %d) = %d, want %d", tt.step, tt.targeted, got, tt.want)
		}
	}
	if got := (&Staged{}).StepTarget(0, 9); got != 9 {
		t.Errorf("a strategy without steps: StepTarget = %d, want every device", got)
	}
	for _, tt := range []struct {
		step int
		want time.Duration
	}{{0, 0}, {1, 10 * time.Minute}, {4, time.Hour}, {5, 0}, {-1, 0}} {
		if got := s.StepPause(tt.step); got != tt.want {
			t.Errorf("StepPause(%d) = %v, want %v", tt.step, got, tt.want)
		}
	}
	for _, tt := range []struct {
		threshold IntOrPercent
		targeted  int
		want      int
	}{
		{"", 200, 1}, {"0", 200, 1}, {"0%", 200, 1}, {"3", 200, 3}, {"5%", 200, 10},
		{"5%", 10, 1}, {"5%", 21, 2}, {"100%", 8, 8}, {"bad", 200, 1}, {"5%", 0, 1},
	} {
		st := Staged{FailureThreshold: tt.threshold}
		if got := st.FailureLimit(tt.targeted); got != tt.want {
			t.Errorf("FailureLimit(%q, %d) = %d, want %d", tt.threshold, tt.targeted, got, tt.want)
		}
	}
	for _, tt := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"canary": "true", "ring": "0"}, 0},
		{map[string]string{"canary": "false", "ring": ""}, 1},
		{map[string]string{"canary": "false"}, 2},
		{nil, 2},
	} {
		if got := s.OrderRank(tt.labels); got != tt.want {
			t.Errorf("OrderRank(%v) = %d, want %d", tt.labels, got, tt.want)
		}
	}
	if got := (&Staged{}).ProgressDeadline(); got != 600*time.Second {
		t.Errorf("default ProgressDeadline = %v, want 10m", got)
	}
	if got := (&Staged{ProgressDeadlineSeconds: ptr[int32](30), MinReadySeconds: 5}); got.ProgressDeadline() != 30*time.Second || got.MinReady() != 5*time.Second {
		t.Errorf("ProgressDeadline, MinReady = %v, %v; want 30s, 5s", got.ProgressDeadline(), got.MinReady())
	}
	if got := []int{(&Staged{}).NumSteps(), s.NumSteps()}; !slices.Equal(got, []int{1, 5}) {
		t.Errorf("NumSteps = %v, want [1 5]", got)
	}
}

func TestStagedPauseNumberHint(t *testing.T) {
	_, err := DecodeManifests([]byte(deploymentWithStrategy(`{type: Staged, staged: {steps: [{percent: 10, pause: 10}, {percent: 100}]}}`)))
	if err == nil || !strings.Contains(err.Error(), "hint: write pause as a duration with its unit") {
		t.Errorf("err = %v, want a hint on how to write pause", err)
	}
}
