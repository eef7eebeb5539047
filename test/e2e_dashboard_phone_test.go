package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleet/schema"
	"github.com/fleetmq/fleet/test/sysdeps"
)

// TestDashboardPhone opens the dashboard of a real fleet-hub in Chromium
// at a phone's viewport (390×844, as an iPhone 12 to 15): two devices
// that report over MQTT as an agent would, one never seen, two
// deployments and a few events. On every page it checks that no table
// cell is cut off or hidden (the tables never scroll sideways: every
// cell's text lies inside its cell, its table and the screen), that an
// event takes at most two lines, that a device never seen is not shown
// as a warning, and that the sign-in page shows neither the connection
// state nor "Sign out". It needs no containerd.
func TestDashboardPhone(t *testing.T) {
	if testing.Short() {
		t.Skip("browser end-to-end test: skipped under -short")
	}
	sysdeps.Require(t, "chromium")
	h := StartHub(t, HubOptions{})
	seedPhoneFleet(t, h)

	b := startBrowser(t, h.URL, 390, 844)
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	// Each step goes on after a failure of the one before: they check
	// different things of the same signed-in page.
	step := func(name string, fn func(t *testing.T)) {
		t.Helper()
		t.Run(name, func(st *testing.T) {
			b.t = st
			defer func() { b.t = t }()
			fn(st)
		})
	}

	step("sign_in_page_shows_no_session", func(t *testing.T) {
		b.do("open", chromedp.Navigate(b.base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		b.pageScreenshot("phone-sign-in.png")
		shown := eval[[]string](b, `['#top', '#conn', '#signout', '#who']
			.filter((s) => { const e = document.querySelector(s); return e && e.checkVisibility(); })
			.map((s) => s + ' "' + document.querySelector(s).textContent.trim() + '"')`)
		if len(shown) > 0 {
			t.Errorf("the sign-in page shows %s: nobody is signed in", strings.Join(shown, ", "))
		}
		b.login(h.Token)
		b.awaitText("#conn", "Live")
		if !eval[bool](b, `document.querySelector('#signout').checkVisibility()`) {
			t.Error("signed in, the page shows no Sign out button")
		}
	})

	step("overview", func(t *testing.T) {
		b.awaitText("main table", "web", "collector")
		b.awaitText(`[data-count="converged"] .n`, "2")
		b.await("the events", `document.querySelectorAll('main table')[1].tBodies[0].rows.length >= 4`)
		b.pageScreenshot("phone-overview.png")
		b.checkFits("overview")
		b.checkEventRows("overview")
		b.checkNotAmber("overview: the Converged card (2 converged, 1 never seen)", `[data-count="converged"]`)
		b.dark(true)
		b.pageScreenshot("phone-overview-dark.png")
		b.checkNotAmber("overview, dark: the Converged card", `[data-count="converged"]`)
		b.dark(false)
	})

	step("devices", func(t *testing.T) {
		b.goTo("#/devices")
		b.awaitText("#devices-table tbody", "phone-pi-1", "phone-pi-2", "phone-never")
		b.pageScreenshot("phone-devices.png")
		b.checkFits("devices")
		b.checkNotAmber("devices: the row of the device never seen", `#devices-table tbody tr:has(a[href="#/devices/phone-never"])`)
		// The column headers sort the table: on a phone too.
		hidden := eval[[]string](b, `[...document.querySelectorAll('#devices-table th button.sort')]
			.filter((e) => !e.checkVisibility() || e.getBoundingClientRect().right > document.documentElement.clientWidth)
			.map((e) => e.textContent)`)
		if len(hidden) > 0 {
			t.Errorf("devices: sort buttons not on the screen: %q", hidden)
		}
		b.click(`#devices-table th:nth-child(5) button`) // restarts, ascending
		b.click(`#devices-table th:nth-child(5) button`) // descending
		b.awaitText("#devices-table tbody tr:first-child", "phone-pi-2")
	})

	step("device", func(t *testing.T) {
		b.goTo("#/devices/phone-pi-2")
		b.awaitText(`tr[data-pod="web"]`, "Running")
		b.awaitText("main", "BackOff")
		b.pageScreenshot("phone-device.png")
		b.checkFits("device")
		b.checkEventRows("device")
	})

	step("device_never_seen", func(t *testing.T) {
		b.goTo("#/devices/phone-never")
		b.awaitText("main h1", "phone-never", "Never seen")
		b.pageScreenshot("phone-device-never-seen.png")
		b.checkFits("device never seen")
		b.checkNotAmber("device never seen: the heading", `main h1`)
	})

	step("deployment", func(t *testing.T) {
		b.goTo("#/deployments/web")
		b.awaitText("main", "Revision history", "phone-never", "phone-pi-1")
		b.pageScreenshot("phone-deployment.png")
		b.checkFits("deployment")
		b.checkNotAmber("deployment: the row of the device never seen", `main tbody tr:has(a[href="#/devices/phone-never"])`)
	})

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %s", strings.Join(errs, "\n"))
	}
}

// seedPhoneFleet registers three devices, two of which report over MQTT
// as an agent does (one with a crash-looping pod), and two deployments;
// the reporting devices send a few events.
func seedPhoneFleet(t *testing.T, h *Hub) {
	t.Helper()
	tokens := map[string]string{}
	for _, name := range []string{"phone-pi-1", "phone-pi-2", "phone-never"} {
		tokens[name] = addDevice(t, h, name, map[string]string{"site": "lab", "role": "sensor", "rack": "r07"})
	}
	applyYAML(t, h, webYAML("web", "registry.example/shop/web:1.4.2", map[string]string{"site": "lab"}))
	applyYAML(t, h, webYAML("collector", "registry.example/shop/collector:2.0.0", map[string]string{"role": "sensor"}))
	now := time.Now().UTC()
	for i, name := range []string{"phone-pi-1", "phone-pi-2"} {
		c := mustDialMQTT(t, h.MQTTURL, name, tokens[name], dialOpts{})
		c.subscribe(topics.Device(name, schema.TopicDesired))
		ds := c.awaitDesired(name, func(ds schema.DesiredState) bool { return len(ds.Pods) == 2 })
		pods := runningPods(ds)
		started := now.Add(-time.Hour)
		for k := range pods {
			pods[k].Containers = []schema.ContainerStatus{{Name: "app", Image: "registry.example/shop/" + pods[k].Name + ":1.4.2", State: "running", StartedAt: &started}}
		}
		if i == 1 {
			pods[1].Restarts, pods[1].Containers[0].Restarts = 12, 12
			pods[1].Containers = append(pods[1].Containers, schema.ContainerStatus{Name: "exporter", Image: "registry.example/shop/exporter:0.9", State: "exited", Reason: "Error", ExitCode: 2})
		}
		c.mustPublish(topics.Device(name, schema.TopicOnline), true, []byte(schema.Online))
		c.mustPublish(topics.Device(name, schema.TopicStatus), true, statusPayload(name, ds.Generation, ds.Store, pods...))
		for j, ev := range []schema.Event{
			{Type: schema.EventNormal, Reason: "Pulled", Pod: "web", Container: "app", Message: "Pulled image registry.example/shop/web:1.4.2"},
			{Type: schema.EventNormal, Reason: "Started", Pod: "web", Container: "app", Message: "Started container app"},
			{Type: schema.EventWarning, Reason: "BackOff", Pod: "collector", Container: "app", Message: "Back-off restarting container"},
			{Type: schema.EventWarning, Reason: "Unhealthy", Pod: "collector", Container: "app",
				Message: "Liveness probe failed: Get \"http://127.0.0.1:8080/healthz\": dial tcp 127.0.0.1:8080: connect: connection refused (the probe runs every 10 s and the container restarts after 3 failures)"},
		} {
			ev.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindEvent}
			ev.ID = fmt.Sprintf("%s-%d", name, j)
			ev.Device = name
			ev.Time = now.Add(time.Duration(j-10) * time.Minute)
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			c.mustPublish(topics.Device(name, schema.TopicEvents), false, raw)
		}
	}
	awaitf(t, mqttWait, func() bool {
		var events schema.EventList
		if err := json.Unmarshal(mustDo(t, h, http.MethodGet, "/v1/events", nil, http.StatusOK), &events); err != nil {
			t.Fatal(err)
		}
		converged := func(name string) bool { st := getDevice(t, h, name).Status; return st != nil && st.Converged }
		return len(events.Items) == 8 && converged("phone-pi-1") && converged("phone-pi-2")
	}, "8 events and two devices converged")
}

// pageScreenshot saves the whole page, what is below the screen too, in
// the test's artifact directory.
func (b *browser) pageScreenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.fail("screenshot", err)
	}
	p := filepath.Join(b.t.ArtifactDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s: %d KB", p, len(png)/1024)
}

// checkFits fails the test for every table cell on the page that is cut
// off or hidden: a table wider than its box (it would scroll sideways)
// or than the screen, a cell not shown, or a cell's text outside the
// cell (overflow hidden, an ellipsis) or outside the table. Empty cells
// and screen-reader-only text do not count.
func (b *browser) checkFits(page string) {
	b.t.Helper()
	bad := eval[[]string](b, `(() => {
		const vw = document.documentElement.clientWidth;
		const out = [];
		if (document.documentElement.scrollWidth > vw) out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' px wide, the screen ' + vw);
		const inside = (r, box) => r.left >= box.left - 1 && r.right <= box.right + 1;
		for (const wrap of document.querySelectorAll('main .table-wrap')) {
			const table = wrap.querySelector('table');
			const name = (table.caption && table.caption.textContent) || table.id;
			const heads = table.tHead ? [...table.tHead.rows[0].cells].map((c) => c.textContent.trim() || '#' + (c.cellIndex + 1)) : [];
			if (wrap.scrollWidth > wrap.clientWidth + 1) out.push(name + ': scrolls sideways (' + wrap.scrollWidth + ' px in ' + wrap.clientWidth + ')');
			const box = wrap.getBoundingClientRect();
			if (box.left < -1 || box.right > vw + 1) out.push(name + ': wider than the screen (' + box.left + '…' + box.right + ')');
			for (const tr of table.tBodies[0].rows) {
				for (const td of tr.cells) {
					if (!td.textContent.trim() && !td.querySelector('button, a, input, [role="img"]')) continue;
					const what = name + ', row ' + (tr.sectionRowIndex + 1) + ', ' + (heads[td.cellIndex] || 'column ' + (td.cellIndex + 1)) + ' "' + td.textContent.trim().slice(0, 40) + '"';
					if (!td.checkVisibility()) { out.push(what + ': hidden'); continue; }
					const cell = td.getBoundingClientRect();
					const rects = [];
					const text = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
					for (let n; (n = text.nextNode());) {
						if (n.parentElement.closest('.sr-only') || !n.parentElement.checkVisibility()) continue;
						const range = document.createRange();
						range.selectNodeContents(n);
						rects.push(...range.getClientRects());
					}
					for (const el of td.querySelectorAll('*')) {
						if (el.closest('.sr-only') || !el.checkVisibility()) continue;
						rects.push(el.getBoundingClientRect());
					}
					rects.splice(0, rects.length, ...rects.filter((r) => r.width > 0 && r.height > 0));
					const off = rects.find((r) => !inside(r, cell) || !inside(r, box) || r.left < 0 || r.right > vw + 1);
					if (off) out.push(what + ': cut off (text at ' + Math.round(off.left) + '…' + Math.round(off.right) + ' px, the cell ' + Math.round(cell.left) + '…' + Math.round(cell.right) + ', the table ' + Math.round(box.left) + '…' + Math.round(box.right) + ')');
				}
			}
		}
		return out;
	})()`)
	for _, s := range bad {
		b.t.Errorf("%s: %s", page, s)
	}
}

// checkEventRows fails the test for an event that takes more than two
// lines: what, where and when on one, the message on the next. A message
// longer than a line may wrap (it is never cut off: checkFits).
func (b *browser) checkEventRows(page string) {
	b.t.Helper()
	bad := eval[[]string](b, `(() => {
		const out = [];
		const tables = [...document.querySelectorAll('main table')].filter((t) => t.caption && t.caption.textContent.startsWith('Recent events'));
		if (!tables.length) out.push('no events table');
		for (const table of tables) {
			for (const tr of table.tBodies[0].rows) {
				const msg = tr.cells[tr.cells.length - 1];
				if (msg.textContent.length > 40) continue;
				const lh = parseFloat(getComputedStyle(msg).lineHeight);
				const range = document.createRange();
				range.selectNodeContents(tr);
				const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0).map((r) => Math.round(r.bottom / (lh / 2))));
				const lines = [...tops].sort((a, c) => a - c).filter((v, i, a) => i === 0 || v - a[i - 1] > 1).length;
				const height = tr.getBoundingClientRect().height;
				if (lines > 2 || height > 2 * lh + 24) out.push('the event "' + tr.textContent.slice(0, 80) + '" takes ' + lines + ' lines, ' + Math.round(height) + ' px (line height ' + lh + ' px)');
			}
		}
		return out;
	})()`)
	for _, s := range bad {
		b.t.Errorf("%s: %s", page, s)
	}
}

// checkNotAmber fails the test when any element in sel is drawn in the
// warning colours (the text or the background of .badge.warn).
func (b *browser) checkNotAmber(what, sel string) {
	b.t.Helper()
	bad := eval[[]string](b, `(() => {
		const probe = document.createElement('span');
		probe.className = 'badge warn';
		document.body.append(probe);
		const warn = getComputedStyle(probe).color, warnBg = getComputedStyle(probe).backgroundColor;
		probe.remove();
		const root = document.querySelector(`+jsString(sel)+`);
		if (!root) return ['not on the page'];
		return [root, ...root.querySelectorAll('*')].filter((e) => e.checkVisibility()).filter((e) => {
			const s = getComputedStyle(e);
			return s.color === warn || s.backgroundColor === warnBg;
		}).map((e) => e.tagName.toLowerCase() + '.' + [...e.classList].join('.') + ' "' + e.textContent.trim().slice(0, 40) + '"');
	})()`)
	for _, s := range bad {
		b.t.Errorf("%s: drawn as a warning: %s", what, s)
	}
}
