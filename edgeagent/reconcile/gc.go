package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleet/edgeagent/runtime"
	"github.com/fleetmq/fleet/schema"
)

// Image garbage collection. Only images the agent pulled are ever deleted
// (runtime.Runtime.PulledImages); of those the collector keeps
//   - the images of the desired pods, of the pods it runs (a steady
//     revision gone back to), of every container that exists, and of
//     each pod's steady revision (what a failing new revision falls back
//     to);
//   - the images of each pod's previous steady revision, for an undo
//     that starts without a pull, except when free space on the
//     filesystem holding the images is below the floor (DiskFloor):
//     then they are deleted, oldest revision first, until free space is
//     back above it;
//
// and deletes every other. It runs only when a pass has converged (no
// action planned or in flight, so never in the middle of a replace), when
// the set of images to keep has changed since the last collection, and
// otherwise at most every ImageGCInterval. Deletions are reported as one
// ImageGC event.

// DefaultImageGCInterval is Options.ImageGCInterval's default.
const DefaultImageGCInterval = 5 * time.Minute

// DiskFloor is the free space the image garbage collector keeps on the
// filesystem holding the images: a percentage of its size, or a number of
// bytes.
type DiskFloor struct {
	// Percent of the filesystem's size (0 < Percent < 100), or
	Percent float64
	// Bytes, when Percent is 0.
	Bytes uint64
	// Off disables the floor: previous revisions' images are never
	// deleted.
	Off bool
}

// DefaultDiskFloor keeps 10 % of the filesystem free. A percentage suits
// devices from 4 GB SD cards (400 MB) to large disks.
var DefaultDiskFloor = DiskFloor{Percent: 10}

// ParseDiskFloor parses a floor as the --image-gc-min-free flag gives
// it: "10%", a size ("1Gi", "500M", "1073741824"), or "0" for none.
func ParseDiskFloor(s string) (DiskFloor, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || v < 0 || v >= 100 {
			return DiskFloor{}, fmt.Errorf("disk floor %q: want a percentage from 0 to 99.9, or a size such as 1Gi", s)
		}
		if v == 0 {
			return DiskFloor{Off: true}, nil
		}
		return DiskFloor{Percent: v}, nil
	}
	n, err := schema.ParseMemory(s)
	if err != nil || n < 0 {
		return DiskFloor{}, fmt.Errorf("disk floor %q: want a percentage such as 10%% or a size such as 1Gi", s)
	}
	if n == 0 {
		return DiskFloor{Off: true}, nil
	}
	return DiskFloor{Bytes: uint64(n)}, nil
}

// String returns the floor as ParseDiskFloor reads it.
func (f DiskFloor) String() string {
	switch {
	case f.Off:
		return "0"
	case f.Percent > 0:
		return strconv.FormatFloat(f.Percent, 'f', -1, 64) + "%"
	}
	return strconv.FormatUint(f.Bytes, 10)
}

// Below reports whether d's free space is under the floor.
func (f DiskFloor) Below(d runtime.DiskSpace) bool {
	switch {
	case f.Off || d.Total == 0:
		return false
	case f.Percent > 0:
		return float64(d.Free) < float64(d.Total)*f.Percent/100
	}
	return d.Free < f.Bytes
}

// UndoImage is an image kept for a fast undo: one of a pod's previous
// steady revision. Since is when that revision became steady (older ones
// go first when space is short).
type UndoImage struct {
	Image string
	Since time.Time
}

// ImageGCPlan says what the image garbage collector deletes.
type ImageGCPlan struct {
	// Unused are pulled images nothing keeps: deleted.
	Unused []string
	// Reclaimable are pulled images kept only for an undo, oldest first:
	// deleted one at a time while free space is below the floor.
	Reclaimable []string
}

// PlanImageGC sorts the pulled images into kept (needed, by any reference
// to them), reclaimable (only kept for an undo) and unused. It is pure.
func PlanImageGC(pulled []runtime.Image, needed []string, undo []UndoImage) ImageGCPlan {
	need := map[string]bool{}
	for _, ref := range needed {
		need[canonicalImage(ref)] = true
	}
	since := map[string]time.Time{}
	for _, u := range undo {
		n := canonicalImage(u.Image)
		if t, ok := since[n]; !ok || u.Since.After(t) {
			since[n] = u.Since
		}
	}
	var plan ImageGCPlan
	type aged struct {
		name  string
		since time.Time
	}
	var reclaim []aged
	for _, img := range pulled {
		n := canonicalImage(img.Name)
		if need[n] {
			continue
		}
		if t, ok := since[n]; ok {
			reclaim = append(reclaim, aged{img.Name, t})
			continue
		}
		plan.Unused = append(plan.Unused, img.Name)
	}
	slices.SortFunc(reclaim, func(a, b aged) int {
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, a := range reclaim {
		plan.Reclaimable = append(plan.Reclaimable, a.name)
	}
	slices.Sort(plan.Unused)
	return plan
}

// canonicalImage is runtime.ImageName of ref, or ref when it does not
// parse (it then only matches itself).
func canonicalImage(ref string) string {
	if n, err := runtime.ImageName(ref); err == nil {
		return n
	}
	return ref
}

// gcInputs returns the images a converged device keeps: needed and those
// kept for an undo.
func gcInputs(desired []schema.Pod, observed []runtime.Container, plan Plan) ([]string, []UndoImage) {
	var needed []string
	addPod := func(p schema.Pod) {
		for _, c := range podContainers(p) {
			needed = append(needed, c.Image)
		}
	}
	for _, p := range desired {
		addPod(p)
	}
	for _, p := range plan.Pods {
		addPod(p)
	}
	for _, c := range observed {
		needed = append(needed, c.Image)
	}
	var undo []UndoImage
	for _, r := range plan.Rollouts {
		if r.Steady != nil {
			addPod(r.Steady.Pod)
		}
		if r.Current != nil {
			addPod(r.Current.Pod) // may become steady while it runs
		}
		if r.Previous != nil {
			for _, c := range podContainers(r.Previous.Pod) {
				undo = append(undo, UndoImage{Image: c.Image, Since: r.Previous.Since})
			}
		}
	}
	return needed, undo
}

// imageGC is the collector's memory between passes.
type imageGC struct {
	key      string    // what was kept at the last collection
	next     time.Time // when to collect again even if nothing changed
	failures int
	warned   bool // the disk measure failed once: logged
}

// gcKey identifies a set of images to keep.
func gcKey(needed []string, undo []UndoImage) string {
	names := make([]string, 0, len(needed)+len(undo))
	for _, n := range needed {
		names = append(names, canonicalImage(n))
	}
	for _, u := range undo {
		names = append(names, "undo:"+canonicalImage(u.Image)+"@"+u.Since.UTC().Format(time.RFC3339Nano))
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), "\n")
}

// collectImages runs the image garbage collector if it is due. It is
// called from the loop after a converged pass, so no worker runs and no
// image is being pulled or used for a create meanwhile.
func (r *Reconciler) collectImages(ctx context.Context, observed []runtime.Container, plan Plan, now time.Time) {
	needed, undo := gcInputs(r.pods, observed, plan)
	key := gcKey(needed, undo)
	if key == r.gc.key && now.Before(r.gc.next) {
		return
	}
	r.gc.key = key
	lctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	pulled, err := r.o.Runtime.PulledImages(lctx)
	cancel()
	if err != nil {
		r.gcFailed(ctx, now, "list images failed", err)
		return
	}
	gp := PlanImageGC(pulled, needed, undo)
	var unused, reclaimed []string
	var errs []error
	for _, img := range gp.Unused {
		if err := r.removeImage(ctx, img); err != nil {
			errs = append(errs, err)
			continue
		}
		unused = append(unused, img)
	}
	floor := r.o.ImageGCMinFree
	ds, derr := r.diskSpace(ctx)
	below := derr == nil && floor.Below(ds)
	for _, img := range gp.Reclaimable {
		if !below {
			break
		}
		if err := r.removeImage(ctx, img); err != nil {
			errs = append(errs, err)
			continue
		}
		reclaimed = append(reclaimed, img)
		ds, derr = r.diskSpace(ctx)
		below = derr == nil && floor.Below(ds)
	}
	if below {
		r.log.Warn("free disk space below the floor; no image the agent may delete is left", "path", ds.Path, "free", ds.Free, "total", ds.Total, "floor", floor.String())
		r.o.Events.Record(schema.EventWarning, "ImageGC", "", "",
			fmt.Sprintf("free space %s of %s is below the floor %s, and no image the agent may delete is left", bytesString(ds.Free), bytesString(ds.Total), floor))
	}
	if msg := gcMessage(unused, reclaimed, floor); msg != "" {
		r.log.Info("image garbage collection", "deleted_unused", unused, "deleted_previous", reclaimed, "free", ds.Free, "floor", floor.String())
		r.o.Events.Record(schema.EventNormal, "ImageGC", "", "", msg)
	}
	if err := errors.Join(errs...); err != nil {
		r.gcFailed(ctx, now, "deleting images failed", err)
		return
	}
	r.gc.failures = 0
	r.gc.next = now.Add(r.o.ImageGCInterval)
}

func (r *Reconciler) gcFailed(ctx context.Context, now time.Time, what string, err error) {
	if ctx.Err() != nil {
		return // shutting down: the next agent collects
	}
	r.gc.next = now.Add(r.o.Retry.Jittered(r.gc.failures, r.rnd))
	r.gc.failures++
	r.log.Warn("image garbage collection: "+what, "err", err, "retry_at", r.gc.next)
}

func (r *Reconciler) removeImage(ctx context.Context, img string) error {
	rctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	defer cancel()
	if err := r.o.Runtime.RemoveImage(rctx, img); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("remove image %s: %w", img, err)
	}
	return nil
}

// diskSpace measures the filesystem holding the images, or, when the
// runtime cannot tell, the one holding the state directory (on most
// devices the same: /var/lib).
func (r *Reconciler) diskSpace(ctx context.Context) (runtime.DiskSpace, error) {
	dctx, cancel := context.WithTimeout(ctx, r.o.OpTimeout)
	ds, err := r.o.Runtime.DiskSpace(dctx)
	cancel()
	if err == nil {
		return ds, nil
	}
	ds, serr := runtime.StatFS(r.o.State.Root())
	if serr != nil {
		err = errors.Join(err, serr)
		if !r.gc.warned {
			r.gc.warned = true
			r.log.Warn("cannot measure free disk space; the image floor is not applied", "err", err)
		}
		return runtime.DiskSpace{}, err
	}
	if !r.gc.warned {
		r.gc.warned = true
		r.log.Info("runtime cannot measure its disk; measuring the state directory's instead", "err", err, "path", ds.Path)
	}
	return ds, nil
}

// gcMessage is the ImageGC event's message ("" when nothing was deleted).
func gcMessage(unused, reclaimed []string, floor DiskFloor) string {
	var parts []string
	if len(unused) > 0 {
		parts = append(parts, "deleted images no longer used: "+listNames(unused))
	}
	if len(reclaimed) > 0 {
		parts = append(parts, fmt.Sprintf("deleted previous revisions' images to keep %s free: %s", floor, listNames(reclaimed)))
	}
	return strings.Join(parts, "; ")
}

// listNames joins names, at most 10 of them.
func listNames(names []string) string {
	if len(names) <= 10 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
}

func bytesString(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
