package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// DefaultProgressDeadlineSeconds is the default of
// staged.progressDeadlineSeconds.
const DefaultProgressDeadlineSeconds = 600

// maxStagedSteps bounds staged.steps.
const maxStagedSteps = 100

var intOrPercentType = reflect.TypeFor[IntOrPercent]()

// UnmarshalJSON accepts a JSON string or number. A number is kept as it is
// written ("1.5" too), for validation to judge with the field's path.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = IntOrPercent(s)
		return nil
	case len(b) > 0 && (b[0] == '-' || '0' <= b[0] && b[0] <= '9') && json.Valid(b):
		*v = IntOrPercent(b)
		return nil
	}
	return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: intOrPercentType}
}

// jsonValueKind names the JSON type of the value b starts with.
func jsonValueKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "value"
}

// parseIntOrPercent parses a count ("3") or an integer percentage from 0%
// to 100% ("5%"). percent says which it is.
func parseIntOrPercent(s string) (n int, percent bool, err error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 || p != strconv.Itoa(n) {
			return 0, false, fmt.Errorf("%q: want a whole percentage from 0%% to 100%%, such as 5%%", truncate(s))
		}
		return n, true, nil
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%q: want a count of devices (0 or more, such as 3) or a percentage of the targeted devices (such as 5%%)", truncate(s))
	}
	return n, false, nil
}

// The methods below read a Staged strategy with its defaults. They trust
// validation: a value validation refuses reads as its default, or as the
// safest reading (a bad failure threshold stops at the first failure).

// MinReady returns minReadySeconds as a duration.
func (s *Staged) MinReady() time.Duration {
	return time.Duration(max(s.MinReadySeconds, 0)) * time.Second
}

// ProgressDeadline returns progressDeadlineSeconds as a duration, 600s by
// default.
func (s *Staged) ProgressDeadline() time.Duration {
	if s.ProgressDeadlineSeconds == nil || *s.ProgressDeadlineSeconds < 1 {
		return DefaultProgressDeadlineSeconds * time.Second
	}
	return time.Duration(*s.ProgressDeadlineSeconds) * time.Second
}

// FailureLimit returns how many failed devices, out of targeted, stop the
// rollout: at least 1.
func (s *Staged) FailureLimit(targeted int) int {
	if s.FailureThreshold == "" {
		return 1
	}
	n, percent, err := parseIntOrPercent(string(s.FailureThreshold))
	if err != nil {
		return 1
	}
	if percent {
		n = ceilPercent(n, targeted)
	}
	return max(n, 1)
}

// NumSteps returns the number of steps; a strategy without steps has one,
// of 100%.
func (s *Staged) NumSteps() int {
	return max(len(s.Steps), 1)
}

// StepTarget returns how many of targeted devices may run the new pod once
// step i (from 0) has started: the largest count of the steps up to i, so
// it never decreases, and all of them from the last step on.
func (s *Staged) StepTarget(i, targeted int) int {
	if i >= len(s.Steps)-1 {
		return targeted
	}
	n := 0
	for _, st := range s.Steps[:max(i+1, 0)] {
		n = max(n, st.target(targeted))
	}
	return min(n, targeted)
}

// target is the step's own count out of targeted devices.
func (st StagedStep) target(targeted int) int {
	switch {
	case st.Devices != nil:
		return min(max(int(*st.Devices), 0), targeted)
	case st.Percent != nil:
		return ceilPercent(min(max(int(*st.Percent), 0), 100), targeted)
	}
	return 0
}

// StepPause returns the pause of step i, 0 when it has none.
func (s *Staged) StepPause(i int) time.Duration {
	if i < 0 || i >= len(s.Steps) || s.Steps[i].Pause == "" {
		return 0
	}
	d, err := parsePause(s.Steps[i].Pause)
	if err != nil {
		return 0
	}
	return d
}

// parsePause parses a step's pause: a duration of 0 or more.
func parsePause(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration such as 30s, 10m or 1h30m", truncate(s))
	case d < 0:
		return 0, fmt.Errorf("%q must not be negative", truncate(s))
	}
	return d, nil
}

// OrderRank returns the index of the first selectorOrder entry labels
// satisfy, or len(SelectorOrder) when they satisfy none: devices of a
// lower rank go first.
func (s *Staged) OrderRank(labels map[string]string) int {
	for i, e := range s.SelectorOrder {
		key, value, hasValue := strings.Cut(e, "=")
		if v, ok := labels[key]; ok && (!hasValue || v == value) {
			return i
		}
	}
	return len(s.SelectorOrder)
}

// ceilPercent returns percent% of n, rounded up.
func ceilPercent(percent, n int) int {
	return (percent*n + 99) / 100
}
