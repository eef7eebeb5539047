package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// The rollout phase (issue 28, "Safe rollouts"): a Staged rollout of a
// revision that one device in rolloutFailEvery cannot run must stop at
// the failure threshold, having reached no more devices than the steps up
// to there allow, and roll every device back to the last good revision.
//
// It applies rolloutDeployment v1 (Staged, to every device) and waits for
// its rollout to complete and every device to report v1 ready; then v2,
// whose image the hollow agents of rolloutFailing cannot pull (hollow
// Config.FailImage: the real agent keeps v1 running and reports v2 in
// ImagePullBackOff). The monitor follows what every device reports of the
// pod; GET /v1/deployments/NAME is polled for status.rollout.

// Staged strategy of the rollout phase.
const (
	// rolloutBadImage is v2's image, refused on the failing devices.
	rolloutBadImage = "registry.example.com/fleet/scale-app:2.0.0-refused"
	// rolloutFailEvery: devices 10, 20, 30… in name order (index 9, 19,
	// 29…) fail v2: 10 %, spread through every wave.
	rolloutFailEvery = 10
	// rolloutFailureThreshold is the strategy's failureThreshold.
	rolloutFailureThreshold = "5%"
	// rolloutProgressDeadline is progressDeadlineSeconds: only a device
	// that neither becomes Ready nor fails would wait for it.
	rolloutProgressDeadline = 60
)

// rolloutFailReasons are the container reasons with which the hub counts a
// device failed (hub/controller's failReasons): the monitor's first such
// report starts the failure-to-rollback time.
var rolloutFailReasons = map[string]bool{
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"CrashLoopBackOff":           true,
	"CreateContainerError":       true,
	"CreateContainerConfigError": true,
	"RunContainerError":          true,
}

// rolloutStrategy is v1's and v2's strategy: the steps of the issue.
func rolloutStrategy() schema.Strategy {
	i32 := func(v int32) *int32 { return &v }
	return schema.Strategy{Type: schema.StrategyStaged, Staged: &schema.Staged{
		Steps: []schema.StagedStep{
			{Devices: i32(2)}, {Percent: i32(10)}, {Percent: i32(50)}, {Percent: i32(100)},
		},
		ProgressDeadlineSeconds: i32(rolloutProgressDeadline),
		FailureThreshold:        rolloutFailureThreshold,
		AutoRollback:            true,
	}}
}

// rolloutDeployments returns v1 and v2 of rolloutDeployment, targeting
// every device of the suite; run makes the specs this run's own.
func rolloutDeployments(run string) (v1, v2 *schema.Deployment) {
	sel := map[string]string{scaleLabel: scaleLabelValue}
	v1 = deployment(rolloutDeployment, sel, schema.EnvVar{Name: "RUN", Value: run}, schema.EnvVar{Name: "VERSION", Value: "1"})
	v1.Spec.Strategy = rolloutStrategy()
	v2 = deployment(rolloutDeployment, sel, schema.EnvVar{Name: "RUN", Value: run}, schema.EnvVar{Name: "VERSION", Value: "2"})
	v2.Spec.Strategy = rolloutStrategy()
	v2.Spec.Template.Spec.Containers[0].Image = rolloutBadImage
	return v1, v2
}

// rolloutFailing returns the indexes of the devices that fail v2: every
// rolloutFailEvery-th in name order, and at least one (the last).
func rolloutFailing(n int) []int {
	var out []int
	for i := rolloutFailEvery - 1; i < n; i += rolloutFailEvery {
		out = append(out, i)
	}
	if len(out) == 0 && n > 0 {
		out = []int{n - 1}
	}
	return out
}

// rolloutDueStep is the step (from 1) at which a rollout to n online
// devices, given in name order, must stop when the devices of failing
// (sorted indexes) fail: the first whose target includes the failure
// limit's worth of them. 0: it never stops.
func rolloutDueStep(s *schema.Staged, n int, failing []int) int {
	limit := s.FailureLimit(n)
	for i := range s.NumSteps() {
		target := s.StepTarget(i, n)
		reached, _ := slices.BinarySearch(failing, target) // failing indexes below target
		if reached >= limit {
			return i + 1
		}
	}
	return 0
}

// RolloutFigures are the rollout phase's own figures (Result.Rollout).
type RolloutFigures struct {
	// Phase is v2's final rollout phase (RolledBack is expected) and
	// Reason the hub's one line about it.
	Phase  string `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// StopStep is the step (from 1, of Steps) at which the rollout of v2
	// stopped, and Allowed that step's target: the most devices the
	// strategy lets run v2. DueStep is the step at which it must stop:
	// the first whose devices, in name order, include FailureLimit of the
	// FailDevices.
	Steps    int `json:"steps"`
	StopStep int `json:"stop_step"`
	DueStep  int `json:"due_step"`
	Allowed  int `json:"allowed"`
	// FailDevices is how many devices cannot pull v2's image, and
	// FailureLimit the failureThreshold (5 %) in devices.
	FailDevices  int `json:"fail_devices"`
	FailureLimit int `json:"failure_limit"`
	// EverNew counts the devices that ever reported v2's hash (the
	// monitor, every status); MaxUpdated is the largest
	// status.rollout.updated polled: the most devices the hub gave v2.
	EverNew    int `json:"ever_new"`
	MaxUpdated int `json:"max_updated"`
	// FailedReported counts the devices that reported v2 failing;
	// MaxFailed is the largest status.rollout.failed polled.
	FailedReported int `json:"failed_reported"`
	MaxFailed      int `json:"max_failed"`
	// V1MS: from v1's apply to its rollout Complete (finishedAt),
	// through every step.
	V1MS float64 `json:"v1_ms"`
	// FailureToRollbackMS: from the first report of v2 failing (as the
	// monitor received it) to the rollout RolledBack (finishedAt, the
	// hub's clock: the same machine). LimitToRollbackMS: from the report
	// that brought the failures to FailureLimit.
	FailureToRollbackMS float64 `json:"failure_to_rollback_ms"`
	LimitToRollbackMS   float64 `json:"limit_to_rollback_ms"`
	// RollbackToOldMS: from RolledBack to the last device reporting v1
	// ready again.
	RollbackToOldMS float64 `json:"rollback_to_old_ms"`
}

// rollout is the rollout phase: see the top of the file. Its Result:
// wall = v2's apply to every device reporting v1 ready again; per device
// that ever reported v2, from RolledBack to its v1 ready again (p50, p99,
// max); lost = devices not back on v1; "hub says" = when the API first
// reported every device converged, from v2's apply.
func (s *suite) rollout(ctx context.Context) Result {
	r := s.result(phaseRollout)
	fail := func(err error) Result { r.Error = err.Error(); return r }
	ctx, cancel := context.WithTimeout(ctx, s.deadline(120*time.Second, 30*time.Millisecond))
	defer cancel()
	n := len(s.names)
	v1, v2 := rolloutDeployments(s.runName())
	oldHash, newHash := podHash(v1), podHash(v2)
	staged := v2.Spec.Strategy.Staged
	fig := &RolloutFigures{
		Steps: staged.NumSteps(), FailDevices: len(s.failing), FailureLimit: staged.FailureLimit(n),
		DueStep: rolloutDueStep(staged, n, s.failing),
	}
	r.Rollout = fig
	if fig.DueStep == 0 {
		return fail(fmt.Errorf("%d failing devices of %d never reach failureThreshold %s: nothing to measure", len(s.failing), n, rolloutFailureThreshold))
	}
	tr := newRolloutTracker(n, rolloutDeployment, oldHash, newHash)
	s.mon.setTap(tr.observe)
	defer s.mon.setTap(nil)

	if err := s.rolloutV1(ctx, v1, oldHash, tr, fig); err != nil {
		return fail(err)
	}
	s.profileStart(ctx, phaseRollout)
	defer s.profileStop(ctx)
	back, err := s.rolloutV2(ctx, v2, newHash, tr, fig, &r)
	if err != nil {
		return fail(err)
	}
	problems := back.problems(&r, fig, tr)
	if len(problems) == 0 {
		cctx, ccancel := context.WithTimeout(ctx, s.hubConfirmSlack())
		at, _, err := s.awaitHub(cctx, func(d *schema.Device) bool { return d.Status != nil && d.Status.Converged })
		ccancel()
		if err != nil {
			problems = append(problems, fmt.Sprintf("the hub did not report every device converged on v1: %v", err))
		} else {
			r.HubConfirmMS = ms(at.Sub(back.ack))
		}
	}
	r.Target = fmt.Sprintf("RolledBack by step %d, ≤ %d devices on v2, all back on v1", fig.DueStep, staged.StepTarget(fig.DueStep-1, n))
	if len(problems) > 0 {
		return fail(fmt.Errorf("%s", strings.Join(problems, "; ")))
	}
	r.OK = true
	return r
}

// rolloutV1 applies v1, the last good revision, and waits for its rollout
// to complete and every device to report it ready (fig.V1MS).
func (s *suite) rolloutV1(ctx context.Context, v1 *schema.Deployment, oldHash string, tr *rolloutTracker, fig *RolloutFigures) error {
	ack, err := s.applyObject(ctx, v1)
	if err != nil {
		return fmt.Errorf("apply v1: %w", err)
	}
	rs, at, err := s.awaitRollout(ctx, oldHash, nil)
	if err != nil {
		return fmt.Errorf("v1 rollout: %w", err)
	}
	if rs.Phase != schema.RolloutComplete {
		return fmt.Errorf("v1 rollout ended %s, want Complete: %s", rs.Phase, rs.Reason)
	}
	fig.V1MS = ms(finished(rs, at).Sub(ack))
	if _, _, err := s.awaitOld(ctx, tr); err != nil {
		return fmt.Errorf("v1 rollout Complete, but %w", err)
	}
	return nil
}

// rolloutBack is what the v2 half of the rollout phase saw.
type rolloutBack struct {
	ack        time.Time // the hub answered v2's apply
	rolledBack time.Time // v2's rollout finished
	// ok: it finished RolledBack; then allBack is when the last device
	// reported v1 ready again, or err says which did not (missing).
	ok      bool
	allBack time.Time
	missing []string
	err     error
}

// rolloutV2 applies v2, which s.failing cannot run, and waits for its
// rollout to end and, if it rolled back, for every device to report v1
// ready again; the CPU and the hub's counters of r are those of that
// span. It records the rollout's end in fig.
func (s *suite) rolloutV2(ctx context.Context, v2 *schema.Deployment, newHash string, tr *rolloutTracker, fig *RolloutFigures, r *Result) (rolloutBack, error) {
	var b rolloutBack
	counters, _ := s.hub.counters(ctx)
	cpu := s.cpuStart()
	ack, err := s.applyObject(ctx, v2)
	if err != nil {
		return b, fmt.Errorf("apply v2: %w", err)
	}
	b.ack = ack
	rs, at, err := s.awaitRollout(ctx, newHash, func(rs *schema.RolloutStatus) {
		fig.MaxUpdated = max(fig.MaxUpdated, rs.Updated)
		fig.MaxFailed = max(fig.MaxFailed, rs.Failed)
	})
	if err != nil {
		return b, fmt.Errorf("v2 rollout: %w", err)
	}
	b.rolledBack = finished(rs, at)
	fig.Phase, fig.Reason, fig.StopStep = string(rs.Phase), rs.Reason, rs.Step
	fig.Allowed = v2.Spec.Strategy.Staged.StepTarget(rs.Step-1, len(s.names))
	b.ok = rs.Phase == schema.RolloutRolledBack
	if b.ok {
		// Every device is given v1 again: wait for each to say it runs
		// it.
		b.allBack, b.missing, b.err = s.awaitOld(ctx, tr)
	}
	s.cpuStop(cpu, r, false)
	s.countersStop(ctx, counters, r)
	return b, nil
}

// problems fills in r and fig from what the devices reported and returns
// what the phase got wrong: v2 not rolled back, devices not back on v1,
// a stop later than due, more devices on v2 than the step allows.
func (b rolloutBack) problems(r *Result, fig *RolloutFigures, tr *rolloutTracker) []string {
	var problems []string
	if !b.ok {
		problems = append(problems, fmt.Sprintf("the rollout of v2 ended %s, want RolledBack: %s", fig.Phase, fig.Reason))
	}
	everNew, failures := tr.counts()
	fig.EverNew, fig.FailedReported = everNew, len(failures)
	if len(failures) > 0 {
		fig.FailureToRollbackMS = ms(b.rolledBack.Sub(failures[0]))
		if len(failures) >= fig.FailureLimit {
			fig.LimitToRollbackMS = ms(b.rolledBack.Sub(failures[fig.FailureLimit-1]))
		}
	}
	// Not dumped (-dump): the latencies are of the devices that ran v2
	// only.
	r.fill(tr.backLatencies(b.rolledBack))
	switch {
	case b.ok && b.err == nil:
		r.WallMS = ms(b.allBack.Sub(b.ack))
		fig.RollbackToOldMS = ms(max(b.allBack.Sub(b.rolledBack), 0))
	case b.ok:
		problems = append(problems, fmt.Sprintf("after the rollback, %v (e.g. %s)", b.err, strings.Join(b.missing[:min(3, len(b.missing))], ", ")))
	}
	if fig.StopStep > fig.DueStep {
		problems = append(problems, fmt.Sprintf("stopped at step %d, after step %d whose devices already held %d failing ones", fig.StopStep, fig.DueStep, fig.FailureLimit))
	}
	if fig.EverNew > fig.Allowed || fig.MaxUpdated > fig.Allowed {
		problems = append(problems, fmt.Sprintf("%d devices reported v2 and the hub gave it to up to %d, more than the %d step %d allows",
			fig.EverNew, fig.MaxUpdated, fig.Allowed, fig.StopStep))
	}
	return problems
}

// runName is the run's directory name, which the suite's deployments carry
// so that every run's specs are its own.
func (s *suite) runName() string {
	for _, e := range s.convergeDep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "RUN" {
			return e.Value
		}
	}
	return ""
}

// applyObject applies one object and returns when the hub answered.
func (s *suite) applyObject(ctx context.Context, o schema.Object) (time.Time, error) {
	body, err := manifest(o)
	if err != nil {
		return time.Time{}, err
	}
	if _, err := s.hub.Client.Apply(ctx, body, false); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// awaitRollout polls rolloutDeployment until its status.rollout, for the
// revision of hash, is final; seen is given every status.rollout of that
// revision read. It returns the last one read and when.
func (s *suite) awaitRollout(ctx context.Context, hash string, seen func(*schema.RolloutStatus)) (*schema.RolloutStatus, time.Time, error) {
	var last *schema.RolloutStatus
	var at time.Time
	err := poll(ctx, s.pollEvery(), func() (bool, error) {
		d, err := s.hub.Client.GetDeployment(ctx, rolloutDeployment)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("get deployment %s: %w", rolloutDeployment, err)
		}
		rs := rolloutOf(d.Status.Rollout, hash)
		if rs == nil {
			return false, nil
		}
		last, at = rs, time.Now()
		if seen != nil {
			seen(rs)
		}
		return rs.Phase.Final(), nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: %s step %d of %d, %d updated, %d ready, %d failed, %d pending; %s)",
			err, last.Phase, last.Step, last.Steps, last.Updated, last.Ready, last.Failed, last.Pending, last.Waiting)
	}
	return last, at, err
}

// rolloutOf is the rollout status of the revision of hash in cur, the
// deployment's status.rollout: cur itself, or, once the hub rolled that
// revision back and wrote the last good template as the current revision,
// the failed revision's end as cur.rolledBackFrom records it (RolledBack
// at its step); nil when cur says nothing of hash.
func rolloutOf(cur *schema.RolloutStatus, hash string) *schema.RolloutStatus {
	switch {
	case cur == nil:
		return nil
	case cur.Hash == hash:
		return cur
	case cur.RolledBackFrom != nil && cur.RolledBackFrom.Hash == hash:
		rb := cur.RolledBackFrom
		return &schema.RolloutStatus{
			Revision: rb.Revision, Hash: rb.Hash, Phase: schema.RolloutRolledBack,
			Step: rb.Step, Steps: rb.Steps, Reason: rb.Reason, FinishedAt: rb.At,
		}
	}
	return nil
}

// finished is when a final rollout finished: its finishedAt, or else when
// the suite read it.
func finished(rs *schema.RolloutStatus, read time.Time) time.Time {
	if rs.FinishedAt.IsZero() {
		return read
	}
	return rs.FinishedAt
}

// awaitOld waits until every device's latest report shows the old
// revision ready, and returns when the last of them arrived; on failure,
// the devices that did not.
func (s *suite) awaitOld(ctx context.Context, tr *rolloutTracker) (time.Time, []string, error) {
	var at time.Time
	var missing []int
	err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		at, missing = tr.allOld()
		return len(missing) == 0, nil
	})
	names := make([]string, len(missing))
	for i, d := range missing {
		names[i] = s.names[d]
	}
	if err != nil {
		return at, names, fmt.Errorf("%d of %d devices do not report v1 ready: %w", len(missing), len(s.names), err)
	}
	return at, nil, nil
}

// rolloutTracker follows, from the monitor, what every device reports of
// the rollout's pod: whether its latest report shows the old revision
// ready and since when, whether it ever reported the new revision, and
// when it first reported the new one failing.
type rolloutTracker struct {
	pod, old, new string

	mu sync.Mutex
	// latest is the time stamp of each device's latest report: reports
	// may be delivered out of order.
	latest []time.Time
	// onOld is when each device's current run of reports showing the old
	// revision ready began (arrival; zero: its latest does not).
	onOld []time.Time
	// everNew says a device reported the new revision's hash.
	everNew []bool
	// failedAt is when a device's first report of the new revision
	// failing arrived (zero: none).
	failedAt []time.Time
}

func newRolloutTracker(n int, pod, oldHash, newHash string) *rolloutTracker {
	return &rolloutTracker{
		pod: pod, old: oldHash, new: newHash,
		latest: make([]time.Time, n), onOld: make([]time.Time, n),
		everNew: make([]bool, n), failedAt: make([]time.Time, n),
	}
}

// observe takes one report of device i, arrived at at (monitor.setTap).
func (t *rolloutTracker) observe(i int, st *statusLite, at time.Time) {
	p := st.pod(t.pod)
	t.mu.Lock()
	defer t.mu.Unlock()
	if p != nil && p.Hash == t.new {
		t.everNew[i] = true
		if t.failedAt[i].IsZero() && slices.ContainsFunc(p.Containers, func(c containerLite) bool { return rolloutFailReasons[c.Reason] }) {
			t.failedAt[i] = at
		}
	}
	if st.Time.Before(t.latest[i]) {
		return // an older report, delivered late
	}
	t.latest[i] = st.Time
	switch {
	case p == nil || p.Hash != t.old || !p.Ready:
		t.onOld[i] = time.Time{}
	case t.onOld[i].IsZero():
		t.onOld[i] = at
	}
}

// allOld returns when the last device came (back) to the old revision
// ready, or the devices whose latest report does not show it.
func (t *rolloutTracker) allOld() (last time.Time, missing []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, at := range t.onOld {
		if at.IsZero() {
			missing = append(missing, i)
		} else if at.After(last) {
			last = at
		}
	}
	return last, missing
}

// counts returns how many devices ever reported the new revision, and
// when each device that reported it failing first did, earliest first.
func (t *rolloutTracker) counts() (everNew int, failures []time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, on := range t.everNew {
		if on {
			everNew++
		}
		if !t.failedAt[i].IsZero() {
			failures = append(failures, t.failedAt[i])
		}
	}
	slices.SortFunc(failures, func(a, b time.Time) int { return a.Compare(b) })
	return everNew, failures
}

// backLatencies returns, for each device that ever reported the new
// revision, the time from origin to its return to the old revision ready
// (-1: not back); and -1 for every other device not on the old revision.
func (t *rolloutTracker) backLatencies(origin time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Duration
	for i, at := range t.onOld {
		switch {
		case at.IsZero():
			out = append(out, -1)
		case t.everNew[i]:
			out = append(out, max(at.Sub(origin), 0))
		}
	}
	return out
}

// summary says the figures in one line, for the table on stdout.
func (f *RolloutFigures) summary() string {
	return fmt.Sprintf("v2 %s at step %d of %d (due %d): %d devices allowed, %d reported v2, the hub gave it to up to %d; "+
		"%d of %d failing devices reported failing (limit %d); first failure → rolled back %s, limit reached → rolled back %s, "+
		"rolled back → all on v1 %s; v1 rollout %s",
		dash(f.Phase), f.StopStep, f.Steps, f.DueStep, f.Allowed, f.EverNew, f.MaxUpdated,
		f.FailedReported, f.FailDevices, f.FailureLimit, msCell(f.FailureToRollbackMS), msCell(f.LimitToRollbackMS),
		msCell(f.RollbackToOldMS), msCell(f.V1MS))
}

// rolloutTable renders the rollout figures of rs as a markdown table ("" if
// none has any).
func rolloutTable(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		f := r.Rollout
		if f == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| staged rollout | v1 rollout (all steps) | failing devices (limit) | stopped at step (due) | allowed on v2 | reported v2 | hub gave v2 (max) | reported failing | first failure → rolled back | limit reached → rolled back | rolled back → all on v1 | result |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		fmt.Fprintf(&b, "| %s, v2 %s | %s | %d (%d) | %d of %d (%d) | %d | %d | %d | %d | %s | %s | %s | %s |\n",
			r.Name, dash(f.Phase), msCell(f.V1MS), f.FailDevices, f.FailureLimit, f.StopStep, f.Steps, f.DueStep,
			f.Allowed, f.EverNew, f.MaxUpdated, f.FailedReported,
			msCell(f.FailureToRollbackMS), msCell(f.LimitToRollbackMS), msCell(f.RollbackToOldMS), verdictMD(r))
	}
	return b.String()
}
