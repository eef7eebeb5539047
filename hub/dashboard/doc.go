// Package dashboard is the hub's web dashboard: a page served at / on the
// API's listener, with its assets embedded in the binary (static/: plain
// HTML, CSS and JavaScript, no framework, nothing loaded from elsewhere),
// and the few routes it needs besides the API's own:
//
//	GET /                         the page (public: it holds no data)
//	GET /ui/{file}                its script, style sheet and icon (public)
//	GET /v1/dashboard/session     who the bearer token belongs to, and its role
//	GET /v1/dashboard/summary     devices online, offline, stale, never seen, converged
//	GET /v1/dashboard/devices     one page of devices: search, label selector, state,
//	                              pod, sort, offset, limit (see Query)
//	GET /v1/dashboard/stream      server-sent events: hello, change, unauthorized, shutdown
//	GET /v1/dashboard/history/online              devices online and offline over the last day
//	GET /v1/dashboard/history/devices/{name}      a device's reported memory, disk, temperature
//	GET /v1/dashboard/history/deployments/{name}  a rollout's updated, ready, failed per step
//
// The history routes answer what hub/history keeps (bounded, in memory;
// see its package doc): the page's charts draw only what they answer.
// They are drawn by static/charts.js with uPlot 1.6.32 (MIT licence,
// static/uplot-LICENSE.txt; static/uplot.min.js and uplot.min.css are its
// npm package's dist files, unchanged, fetched again by vendor-uplot.sh,
// "make uplot", never in CI); app.js loads both only once a chart comes
// into view, so the first view does not carry them.
//
// The /v1/dashboard routes take the API's bearer tokens, like every other
// route; the page keeps the token in sessionStorage and sends it in the
// Authorization header (never in a URL), so the stream is read with fetch,
// not EventSource. Everything else the page shows comes from the API as
// it is (devices, deployments, revisions, events), and the admin actions
// are the API's writes that `fleet rollout pause|resume|undo|restart`
// makes: a monitor's page shows them disabled, and the API refuses them
// anyway.
//
// Live updates are level-triggered. While a stream is open, a tracker
// takes a snapshot of the fleet model every ScanInterval (500 ms): for
// each device its uid, labels and the model's cached status JSON, hashed;
// for each deployment its stored JSON and aggregated status, hashed. It
// compares the snapshot with the previous one and sends each stream the
// names of what changed (or "all devices" beyond MaxNamed); the page
// reloads what it shows if it is concerned. A page that (re)connects gets
// "hello" and reloads everything, so nothing that happened while it was
// away is missed, whatever happened. Unchanged devices cost a hash of
// bytes the model already holds: about 10 ms per scan at 10,000 devices,
// and only while someone watches. The device list is paged, filtered and
// sorted on the hub from the latest snapshot (about 1 ms at 10,000
// devices), so the page never holds the whole fleet.
//
// A stream checks its token every AuthCheck (1 s) and ends with
// "unauthorized" once the hub no longer accepts it (a deleted monitor
// credential, a rotated admin token); it ends with "shutdown" when the
// hub stops (StopOnClose), and the page reconnects with backoff.
package dashboard
