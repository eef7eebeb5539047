// Package history keeps, in bounded memory, what the dashboard's charts
// show: how many devices were online and offline over the last day, what
// each device reported of its memory, disk and temperature, and how each
// Deployment's rollout moved (updated, ready and failed devices per step).
// Nothing is stored: a restarted hub starts its history afresh (the
// store keeps the fleet's state, not its past).
//
// Every series is a ring buffer of fixed-size samples; its bounds are
// constants of this package, checked by its tests:
//
//   - Online: one sample per Interval (default 5 min), Samples of them
//     (default 288: 24 h), each 24 bytes (time, online, offline, the
//     fewest online and the most offline seen within the interval, so a
//     short outage still shows): 6.75 KiB for the whole fleet.
//   - Each device: at most one sample per Interval, from what the device
//     reported (its status's memory and disk, its last top report's
//     memory, disk and temperature), Samples of them, each 16 bytes
//     (DeviceSampleBytes: time, memory used and disk used in KiB,
//     temperature in tenths of °C): 288 × 16 B = 4,608 bytes per device
//     at most (DeviceBoundBytes), plus under 200 bytes of bookkeeping
//     (name, uid, the latest totals). A device that reports less often
//     takes less: its ring grows only as samples come. 10,000 devices
//     reporting for a whole day: at most 46 MB.
//   - Each Deployment: one sample per change of its rollout's counts
//     (revision, step, phase, targeted, updated, ready, failed, pending),
//     RolloutSamples of them (default 256), each 40 bytes
//     (RolloutSampleBytes): 10 KiB per Deployment at most.
//
// A Recorder fills a History from the hub's fleet model (Run): every
// ScanInterval (default 5 s, at most Interval) it reads the online count
// and each device's last report, and every second each Deployment's
// aggregated status, and records what changed. It looks at reports the model already holds; it
// never asks a device anything. Devices and Deployments that are gone
// are dropped at the next scan, and so are a device's samples when a new
// device of the same name (another uid) replaces it.
//
// A History is safe for use from several goroutines. Samples older than
// Interval × Samples age out of the online and device series when read
// and when written; the rollout series are bounded by count only (a
// rollout that finished last week still shows its waves).
package history
