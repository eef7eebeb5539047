package test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// The web dashboard (hub/dashboard) in a real Chromium (Debian's
// chromium package, driven over the DevTools protocol by chromedp)
// against a real fleet-hub:
//
//   - TestDashboard: three agents on a private containerd, as in the demo:
//     a wrong token refused, a monitor's read-only view, a change applied
//     with the CLI reaching the device page without reload, an agent
//     stopped and shown offline, markup in names, annotations and event
//     messages shown as text, a token revoked mid-session, the admin's
//     rollout actions, and a hub restart under a live page.
//   - TestDashboardScale: 10,000 devices; how fast the devices view paints
//     and filters (reported, never asserted).
//   - TestDashboardPhone (e2e_dashboard_phone_test.go): a phone's screen;
//     no table cut off, events in two lines, a device never seen no
//     warning, no session shown before sign-in.
//
// All three skip under -short; without chromium they fail, naming the package
// to install (test/sysdeps).

// browserWait bounds each step in the browser.
const browserWait = 30 * time.Second

// updateDocs rewrites docs/dashboard.png with the overview the test sees.
var updateDocs = func() func() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files and docs/dashboard.png with what the code produces")
	}
	return func() bool { return flag.Lookup("update").Value.String() == "true" }
}()

// browser is a headless Chromium with one tab.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu     sync.Mutex
	errors []string // uncaught exceptions and console errors of the page
}

// startBrowser starts Chromium on a fresh profile; it is closed when the
// test ends.
func startBrowser(t *testing.T, base string, width, height int) *browser {
	t.Helper()
	exe := sysdeps.Require(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, base: strings.TrimSuffix(base, "/")}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error:"
			for _, a := range ev.Args {
				msg += " " + string(a.Value) + a.Description
			}
		default:
			return
		}
		b.mu.Lock()
		b.errors = append(b.errors, msg)
		b.mu.Unlock()
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// do runs actions, failing the test (with the page's text) on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	b.t.Fatalf("browser: %s: %v\npage text:\n%s\npage errors: %v", what, err, text, b.pageErrors())
}

// eval evaluates a JavaScript expression (a promise is awaited).
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

// await polls a JavaScript expression until it is truthy.
func (b *browser) await(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		ctx, cancel := context.WithDeadline(b.ctx, deadline.Add(5*time.Second))
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(50*time.Millisecond)))
		cancel()
		// A poll that started as the page navigated loses its
		// JavaScript context: poll again in the new one.
		if err != nil && strings.Contains(err.Error(), "Cannot find context") && time.Now().Before(deadline) {
			continue
		}
		if err != nil {
			b.fail("wait for "+what, err)
		}
		return
	}
}

// awaitText waits until the element sel exists and its text contains
// every one of want.
func (b *browser) awaitText(sel string, want ...string) {
	b.t.Helper()
	b.await(fmt.Sprintf("%s to contain %q", sel, want), fmt.Sprintf(
		`(() => { const e = document.querySelector(%s); return !!e && %s.every((w) => e.textContent.includes(w)); })()`,
		jsString(sel), jsJSON(want)))
}

// go sets the page's location hash: the dashboard routes without a reload.
func (b *browser) goTo(hash string) {
	b.t.Helper()
	eval[chromedp.Void](b, `location.hash = `+jsString(hash)+`; undefined`)
}

// click clicks the element sel in one step of the page's own thread: a
// live page may rebuild between finding a node and clicking it.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.await(sel+" to be there", fmt.Sprintf(`!!document.querySelector(%s)`, jsString(sel)))
	eval[chromedp.Void](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.focus(); e.click(); })()`, jsString(sel)))
}

// setValue sets a form field's value as typing or picking would, firing
// its input or change event.
func (b *browser) setValue(sel, value, event string) {
	b.t.Helper()
	eval[chromedp.Void](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.value = %s; e.dispatchEvent(new Event(%s, {bubbles: true})); })()`,
		jsString(sel), jsString(value), jsString(event)))
}

func (b *browser) login(token string) {
	b.t.Helper()
	b.do("open the sign-in form", chromedp.WaitVisible(chromedp.CSS("#token")))
	b.setValue("#token", "", "input")
	b.do("sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`form button[type="submit"]`)),
	)
}

func (b *browser) screenshot(name string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.fail("screenshot", err)
	}
	p := filepath.Join(b.t.ArtifactDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s: %d KB", p, len(png)/1024)
	return png
}

// checkNames fails the test for every control on the page without an
// accessible name (text, aria-label or a label), and for images without
// a text alternative.
func (b *browser) checkNames(page string) {
	b.t.Helper()
	unnamed := eval[[]string](b, `[...document.querySelectorAll('a, button, input, select, textarea, [role="img"]')]
		.filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || (e.labels && e.labels.length) || e.closest('[hidden]')))
		.map((e) => e.outerHTML.slice(0, 120))`)
	for _, u := range unnamed {
		b.t.Errorf("%s: a control without an accessible name: %s", page, u)
	}
}

// dark makes the page see prefers-color-scheme: dark (or the default).
func (b *browser) dark(on bool) {
	b.t.Helper()
	p := emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}}
	if on {
		p.Features[0].Value = "dark"
	}
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, p); err != nil {
		b.fail("emulate prefers-color-scheme", err)
	}
}

func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errors)
}

func jsString(s string) string { return jsJSON(s) }

func jsJSON(v any) string {
	out, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(out)
}

// markup is what a hostile label, annotation or event message could hold:
// each would set window.__xss if the page ever parsed it as HTML.
const markup = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`

func TestDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("browser end-to-end test: skipped under -short")
	}
	sysdeps.Require(t, "chromium")
	start := time.Now()
	// A fixed HTTP port, so that the page reaches the restarted hub.
	port := freeTCPPort(t)
	f := StartFleet(t, FleetOptions{
		Agents: 3, DevicePrefix: "demo-pi",
		Labels: func(i int) map[string]string {
			return map[string]string{"role": []string{"sensor", "display", "sensor"}[i], "demo": "fleet"}
		},
		HubArgs: []string{"--http-addr", fmt.Sprintf("127.0.0.1:%d", port)},
	})
	t.Logf("fleet up in %v", time.Since(start).Round(time.Millisecond))
	h := f.Hub

	// Markup where the API takes free text; a label value refuses it.
	if code, body := h.Do(t, http.MethodPost, "/v1/apply", []byte(deviceYAML("odd-0--x", map[string]string{"note": markup}))); code != http.StatusBadRequest {
		t.Fatalf("a label value with markup: %d %s, want 400", code, body)
	}
	applyYAML(t, h, `apiVersion: fleet/v1
kind: Device
metadata:
  name: odd-0--x
  labels: {site: lab}
  annotations:
    note: '`+markup+`'
`)
	oddToken := issueToken(t, h, "odd-0--x")
	dep := func(args ...string) string {
		return `apiVersion: fleet/v1
kind: Deployment
metadata:
  name: dash-web
  annotations: {kubernetes.io/change-cause: '` + markup + `'}
spec:
  selector: {matchLabels: {role: sensor}}
  template:
    spec:
      containers:
      - name: app
        image: ` + f.Image + `
        args: [` + strings.Join(args, ", ") + `]
        env: [{name: GREETING, value: '<b>hello</b>'}]
`
	}
	f.Apply(t, `apiVersion: fleet/v1
kind: Deployment
metadata: {name: heartbeat}
spec:
  selector: {matchLabels: {demo: fleet}}
  template: {spec: {containers: [{name: app, image: `+f.Image+`, args: [sleep, forever]}]}}
`)
	f.AwaitRollout(t, "heartbeat", 3, e2eConverge)
	monitorToken := addMonitor(t, h, "dash-monitor")

	b := startBrowser(t, h.URL, 1280, 860)
	step := func(name string, fn func(t *testing.T)) {
		t.Helper()
		s := time.Now()
		ok := t.Run(name, func(st *testing.T) {
			b.t = st
			defer func() { b.t = t }()
			fn(st)
		})
		if !ok {
			t.FailNow()
		}
		t.Logf("%s took %v", name, time.Since(s).Round(time.Millisecond))
	}

	step("wrong_token_refused", func(t *testing.T) {
		b.do("open", chromedp.Navigate(b.base+"/"))
		b.login("not-a-token")
		b.awaitText("#login-error", "refused")
		if got := eval[bool](b, `document.querySelector('#top').hidden`); !got {
			t.Error("the header shows before signing in")
		}
	})

	step("monitor_sees_the_fleet", func(t *testing.T) {
		b.login(monitorToken)
		b.awaitText("#conn", "Live")
		b.awaitText(`[data-count="devices"] .n`, "4")
		b.awaitText(`[data-count="online"] .n`, "3")
		b.awaitText("main table", "heartbeat")
		b.awaitText("#who", "dash-monitor", "read-only")
		b.checkNames("overview")
		if tok := eval[string](b, `location.href + document.cookie`); strings.Contains(tok, monitorToken) {
			t.Errorf("the token is in the URL or a cookie: %s", tok)
		}
		b.goTo("#/devices")
		b.awaitText("#devices-table tbody", "demo-pi-1", "demo-pi-2", "demo-pi-3", "odd-0--x")
		b.checkNames("devices")
		b.do("search", chromedp.SendKeys(chromedp.CSS("#f-search"), "pi-2"))
		b.awaitText("#devices-count", "1–1 of 1")
		b.setValue("#f-search", "", "input")
		b.do("type a selector", chromedp.SendKeys(chromedp.CSS("#f-selector"), "role=sensor"))
		b.awaitText("#devices-count", "1–2 of 2")
		b.do("bad selector", chromedp.SendKeys(chromedp.CSS("#f-selector"), ",,=("))
		b.awaitText("#f-selector-error", "labelSelector")
	})

	step("apply_reaches_the_device_page_live", func(t *testing.T) {
		b.goTo("#/devices/demo-pi-1")
		b.awaitText("main h1", "demo-pi-1", "Online", "Converged")
		b.awaitText(`tr[data-pod="heartbeat"]`, "Running", "Ready")
		eval[chromedp.Void](b, `window.__sameDocument = 'yes'; undefined`)
		f.Apply(t, dep("sleep", "forever"))
		b.awaitText(`tr[data-pod="dash-web"]`, "Running", "Ready")
		b.awaitText("main h1", "Converged")
		b.checkNames("device")
		if got := eval[string](b, `window.__sameDocument || 'reloaded'`); got != "yes" {
			t.Errorf("the page reloaded (%s): it should update in place", got)
		}
		b.screenshot("device.png")
	})

	step("stopped_agent_turns_offline", func(t *testing.T) {
		b.goTo("#/devices/demo-pi-3")
		b.awaitText("main h1", "demo-pi-3", "Online")
		if err := f.Agent(t, "demo-pi-3").Stop(); err != nil {
			t.Fatalf("stop agent: %v", err)
		}
		b.awaitText("main h1", "Offline")
		f.RestartAgent(t, "demo-pi-3")
		b.awaitText("main h1", "Online")
	})

	step("markup_is_shown_as_text", func(t *testing.T) {
		c := mustDialMQTT(t, h.MQTTURL, "odd-0--x", oddToken, dialOpts{})
		ev, _ := json.Marshal(schema.Event{
			TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent},
			Device:   "odd-0--x", Time: time.Now().UTC(), Type: schema.EventWarning, Reason: "Odd", Message: markup,
		})
		c.mustPublish(topics.Device("odd-0--x", schema.TopicEvents), false, ev)
		b.goTo("#/devices/odd-0--x")
		b.awaitText("main", "odd-0--x", `<img src=x onerror="window.__xss=1">`, `<script>window.__xss=2</script>`)
		// A monitor sees no pod template (env values) and no revisions
		// (change causes): the markup there is checked as the admin.
		b.goTo("#/deployments/dash-web")
		b.awaitText("main", "dash-web", "Hidden: the pod template")
		if got := eval[string](b, `document.querySelector('main').textContent`); strings.Contains(got, "GREETING") {
			t.Errorf("a monitor sees env values on the deployment page: %q", got)
		}
		b.goTo("#/devices/%3Cimg%20src%3Dx%3E")
		b.awaitText("main", "Not found", "<img src=x>")
		if got := eval[string](b, `String(window.__xss) + ' ' + document.querySelectorAll('main img, main script, main b').length`); got != "undefined 0" {
			t.Errorf("markup from the hub became HTML: window.__xss and elements: %s", got)
		}
	})

	step("monitor_cannot_act", func(t *testing.T) {
		b.goTo("#/deployments/dash-web")
		b.awaitText("main h1", "dash-web")
		b.checkNames("deployment")
		got := eval[string](b, `[...document.querySelectorAll('[data-admin]')].map((e) => e.dataset.admin + ':' + e.disabled).join(' ')`)
		if got == "" || strings.Contains(got, "false") {
			t.Errorf("admin buttons for a monitor: %q, want every one disabled", got)
		}
		code := eval[int](b, `fetch('/v1/deployments/dash-web/rollback', {method: 'POST', body: '{}',
			headers: {Authorization: 'Bearer ' + sessionStorage.getItem('fleet.dashboard.token')}}).then((r) => r.status)`)
		if code != http.StatusForbidden {
			t.Errorf("a monitor's rollback through the API: %d, want 403", code)
		}
	})

	step("revoked_token_ends_the_session", func(t *testing.T) {
		b.goTo("#/")
		b.awaitText("#conn", "Live")
		mustDo(t, h, http.MethodDelete, "/v1/credentials/dash-monitor", nil, http.StatusOK)
		b.awaitText("#login-error", "session ended", "no longer accepts")
		if got := eval[string](b, `sessionStorage.getItem('fleet.dashboard.token') || ''`); got != "" {
			t.Error("the revoked token is still in sessionStorage")
		}
	})

	step("admin_pauses_restarts_and_undoes", func(t *testing.T) {
		// From the keyboard: the form has the focus; Enter submits.
		b.do("sign in with the keyboard", chromedp.WaitVisible(chromedp.CSS("#token")))
		if got := eval[string](b, `document.activeElement.id`); got != "token" {
			t.Errorf("the sign-in form opens with the focus on %q, want the token field", got)
		}
		b.do("type the admin token", chromedp.SendKeys(chromedp.CSS("#token"), h.Token+"\r"))
		b.awaitText("#who", "admin")
		b.goTo("#/deployments/dash-web")
		b.awaitText("main", "<script>window.__xss=2</script>", "GREETING=<b>hello</b>")
		if got := eval[string](b, `String(window.__xss) + ' ' + document.querySelectorAll('main img, main script, main b').length`); got != "undefined 0" {
			t.Errorf("markup from the hub became HTML: window.__xss and elements: %s", got)
		}
		b.awaitText(`[data-admin="pause"]`, "Pause")
		b.click(`[data-admin="pause"]`)
		b.awaitText("#action-note", "paused")
		if !f.Deployment(t, "dash-web").Spec.Paused {
			t.Fatal("the deployment is not paused after Pause")
		}
		b.awaitText(`[data-admin="resume"]`, "Resume")
		// The page was rebuilt; the focus stayed where it was, on the
		// button that is now Resume.
		if got := eval[string](b, `document.activeElement.dataset.admin || document.activeElement.tagName`); got != "resume" {
			t.Errorf("after Pause the focus is on %q, want the Resume button", got)
		}
		b.click(`[data-admin="resume"]`)
		b.awaitText("#action-note", "resumed")
		if f.Deployment(t, "dash-web").Spec.Paused {
			t.Fatal("the deployment is still paused after Resume")
		}
		rev := f.Deployment(t, "dash-web").Status.Revision
		b.click(`[data-admin="restart"]`)
		b.click("dialog[open] button.primary")
		b.awaitText("#action-note", "restarted")
		d := f.Deployment(t, "dash-web")
		if d.Spec.Template.Metadata == nil || d.Spec.Template.Metadata.Annotations[schema.AnnotationRestartedAt] == "" || d.Status.Revision <= rev {
			t.Fatalf("no restart: revision %d (was %d), template %+v", d.Status.Revision, rev, d.Spec.Template.Metadata)
		}
		b.click(`[data-admin="undo"]`)
		b.click("dialog[open] button.primary")
		b.awaitText("#action-note", "rolled back from revision")
		f.AwaitRollout(t, "dash-web", 2, e2eConverge)
		b.goTo("#/")
		b.awaitText("main table", "dash-web")
		b.await("every deployment complete", `(() => {
			const rows = [...document.querySelectorAll('main table')[0].tBodies[0].rows];
			return rows.length === 2 && rows.every((r) => r.querySelector('.badge.ok') && r.cells[5].textContent === r.cells[4].textContent);
		})()`)
		b.awaitText(`[data-count="converged"] .n`, "3")
		png := b.screenshot("overview.png")
		b.dark(true)
		b.screenshot("overview-dark.png")
		b.dark(false)
		if updateDocs() {
			root, err := repoRoot()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "docs", "dashboard.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})

	step("hub_restart_under_a_live_page", func(t *testing.T) {
		b.awaitText("#conn", "Live")
		f.KillHub(t)
		b.awaitText("#conn", "Reconnecting")
		f.StartHub(t)
		b.awaitText("#conn", "Live")
		b.awaitText(`[data-count="devices"] .n`, "4")
		if got := eval[bool](b, `!!document.querySelector('#token')`); got {
			t.Error("the hub restart sent the page back to the sign-in form")
		}
	})

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %s", strings.Join(errs, "\n"))
	}
}

// TestDashboardScale measures the devices view with 10,000 devices in the
// store: the time to the first rows after loading the page, and to the
// filtered rows after typing. It reports, never asserts, the times (see
// BENCHMARKS.md); it does assert the bytes of the first view.
func TestDashboardScale(t *testing.T) {
	if testing.Short() {
		t.Skip("browser scale test: skipped under -short")
	}
	sysdeps.Require(t, "chromium")
	const n = 10000
	start := time.Now()
	h := StartHub(t, HubOptions{})
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("shop-%05d", i+1)
	}
	sites := []string{"north", "south", "east", "west", "harbour", "airport", "station", "mall"}
	roles := []string{"sensor", "display", "gateway", "kiosk"}
	for i := 0; i < n; i += 500 {
		var docs []string
		for j := i; j < min(n, i+500); j++ {
			docs = append(docs, fmt.Sprintf(`{"apiVersion":"fleet/v1","kind":"Device","metadata":{"name":%q,"labels":{"site":%q,"role":%q,"rack":"r%02d"}}}`,
				names[j], sites[j%len(sites)], roles[(j/7)%len(roles)], j%50))
		}
		applyYAML(t, h, strings.Join(docs, "\n---\n"))
	}
	t.Logf("%d devices registered through the API in %v", n, time.Since(start).Round(time.Millisecond))

	// The hub keeps each device's last report in its store (v1/status/…)
	// and loads them on start: write reports as the ingest would have.
	seeded := time.Now()
	if err := h.Stop(); err != nil {
		t.Fatalf("stop fleet-hub: %v", err)
	}
	seedReports(t, filepath.Join(h.DataDir, "store"), names)
	h.start()
	t.Logf("reports of %d devices stored and the hub restarted in %v", n, time.Since(seeded).Round(time.Millisecond))
	monitorToken := addMonitor(t, h, "dash-monitor")

	b := startBrowser(t, h.URL, 1280, 860)
	b.do("open", chromedp.Navigate(b.base+"/"))
	b.login(monitorToken)
	b.awaitText(`[data-count="devices"] .n`, "10,000")
	b.awaitText("#conn", "Live")
	firstView := eval[float64](b, `[...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
		.reduce((n, e) => n + (e.transferSize || e.encodedBodySize || 0), 0)`)
	t.Logf("first view (sign-in page, sign-in and overview of %d devices): %.1f KB transferred", n, firstView/1024)
	if firstView > 200*1024 {
		t.Errorf("the first view transferred %.1f KB, over the 200 KB budget", firstView/1024)
	}

	// Load the devices view as a fresh page, three times.
	var paints []float64
	for range 3 {
		b.do("load the devices view", chromedp.Navigate("about:blank"), chromedp.Navigate(b.base+"/#/devices"))
		b.await("the first rows", `window.fleetPerf && window.fleetPerf.devicesFirstRender !== null`)
		paints = append(paints, eval[float64](b, `window.fleetPerf.devicesFirstRender`))
	}
	b.awaitText("#devices-count", "of 10,000 devices")
	fcp := eval[float64](b, `(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime`)
	t.Logf("devices view, %d devices: first rows painted %.0f ms, %.0f ms, %.0f ms after navigation start (first contentful paint %.0f ms)",
		n, paints[0], paints[1], paints[2], fcp)

	// Filters: each types, selects or sorts and waits for the new rows.
	type filter struct {
		what    string
		do      func()
		matched int // devices selected once the input is answered
	}
	keys := func(sel, text string) func() {
		return func() { b.do("type "+text, chromedp.SendKeys(chromedp.CSS(sel), text)) }
	}
	filters := []filter{
		{"search shop-0042", keys("#f-search", "shop-0042"), 10},
		{"clear the search", func() { b.setValue("#f-search", "", "input") }, n},
		{"selector site=harbour", keys("#f-selector", "site=harbour"), 1250},
		{"selector site=harbour,role in (kiosk,display)", keys("#f-selector", ",role in (kiosk,display)"), 535},
		{"search r12", keys("#f-search", "r12"), 22},
		{"status offline", func() { b.setValue("#f-state", "offline", "change") }, 22},
		{"sort by restarts", func() { b.click(`#devices-table th:nth-child(5) button`) }, 22},
	}
	var ms []float64
	for _, fl := range filters {
		before := eval[int](b, `window.fleetPerf.filters.length`)
		fl.do()
		// Typing measures each key; the last one is answered when the
		// rows selected by the whole input are painted.
		last := `window.fleetPerf.filters[window.fleetPerf.filters.length - 1]`
		b.await(fl.what+" to render", fmt.Sprintf(`window.fleetPerf.filters.length > %d && %s.matched === %d`, before, last, fl.matched))
		got := eval[struct{ MS, Fetch, Render float64 }](b, last)
		ms = append(ms, got.MS)
		t.Logf("filter %q: rows painted %.1f ms after the input (answer after %.1f ms, rows built in %.1f ms)", fl.what, got.MS, got.Fetch, got.Render)
	}
	b.screenshot("devices.png")
	// A phone: the same view in one column.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.awaitText("#devices-count", "of 22 ")
	b.screenshot("devices-phone.png")
	slices.Sort(ms)
	t.Logf("filtering %d devices: median %.1f ms, max %.1f ms over %d filters", n, ms[len(ms)/2], ms[len(ms)-1], len(ms))
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %s", strings.Join(errs, "\n"))
	}
}

// seedReports writes a DeviceStatus for every device into the stopped
// hub's store, as its status ingest does: 1 to 3 pods each, a few with
// restarts or a pull error.
func seedReports(t *testing.T, dir string, names []string) {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	now := time.Now().UTC()
	archs := []string{"arm64", "arm", "amd64"}
	for i := 0; i < len(names); i += 1000 {
		_, err := st.Write(context.Background(), func(tx *store.Txn) error {
			for j := i; j < min(len(names), i+1000); j++ {
				started := now.Add(-time.Duration(j%3600) * time.Second)
				var pods []schema.PodStatus
				for p := range 1 + j%3 {
					ps := schema.PodStatus{Name: []string{"collector", "display", "heartbeat"}[p], Hash: "5d1c9a0e", Phase: schema.PhaseRunning, Ready: true,
						Containers: []schema.ContainerStatus{{Name: "app", Image: "registry.example/app:v3", State: "running", StartedAt: &started}}}
					if j%97 == 0 {
						ps.Restarts, ps.Ready = int32(j%7+1), false
						ps.Containers[0].State, ps.Containers[0].Reason = "waiting", "CrashLoopBackOff"
					}
					pods = append(pods, ps)
				}
				raw, err := json.Marshal(schema.DeviceStatus{
					TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeviceStatus},
					Device:   names[j], ObservedGeneration: 1, Time: now.Add(-time.Duration(j%600) * time.Second),
					Agent: schema.AgentInfo{Version: fmt.Sprintf("v1.%d.0", j%4), OS: "linux", Arch: archs[j%len(archs)]},
					Node:  &schema.NodeInfo{Hostname: names[j], MemoryTotalBytes: 4 << 30, MemoryAvailBytes: 2 << 30, UptimeSeconds: int64(86400 + j)},
					Pods:  pods,
				})
				if err != nil {
					return err
				}
				if err := tx.Set(store.StatusKey(names[j]), raw); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("store reports: %v", err)
		}
	}
}
