package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

func (in *Ingest) wakeFlush() {
	select {
	case in.flush <- struct{}{}:
	default:
	}
}

// Flush writes the waiting reports (and fleet/arch labels) to the store
// now. What fails stays waiting for the next flush.
func (in *Ingest) Flush(ctx context.Context) {
	in.mu.Lock()
	// Each map taken is replaced; one left in place (empty) is not read
	// after the unlock, where reports go on writing it.
	var dirty map[string]pendingStatus
	var arch, crashes map[string]string
	if len(in.dirty) > 0 {
		dirty, in.dirty = in.dirty, map[string]pendingStatus{}
	}
	if len(in.arch) > 0 {
		arch, in.arch = in.arch, map[string]string{}
	}
	if len(in.crashes) > 0 {
		crashes, in.crashes = in.crashes, map[string]string{}
	}
	in.mu.Unlock()
	if len(crashes) > 0 {
		if err := in.writeCrashes(ctx, crashes); err != nil {
			in.log.Error("store crash reports", "devices", len(crashes), "err", err)
			in.mu.Lock()
			for k, v := range crashes {
				if _, newer := in.crashes[k]; !newer {
					in.crashes[k] = v
				}
			}
			in.mu.Unlock()
		}
	}
	if len(dirty) > 0 {
		if err := in.writeStatuses(ctx, dirty); err != nil {
			in.log.Error("store device statuses", "devices", len(dirty), "err", err)
			in.requeue(dirty, nil)
		}
	}
	if len(arch) > 0 {
		if err := in.writeArch(ctx, arch); err != nil {
			in.log.Error("store fleet/arch labels", "devices", len(arch), "err", err)
			in.requeue(nil, arch)
		}
	}
}

// requeue puts back what failed, unless newer reports came meanwhile or
// the device is gone (the model dropped its report).
func (in *Ingest) requeue(dirty map[string]pendingStatus, arch map[string]string) {
	// The model first: its lock is never taken under mu.
	maps.DeleteFunc(dirty, func(k string, _ pendingStatus) bool { return !in.model.HasReport(k) })
	maps.DeleteFunc(arch, func(k string, _ string) bool { return !in.model.HasReport(k) })
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, v := range dirty {
		if _, newer := in.dirty[k]; !newer {
			in.dirty[k] = v
		}
	}
	for k, v := range arch {
		if _, newer := in.arch[k]; !newer {
			in.arch[k] = v
		}
	}
}

// writeStatuses stores reports in transactions of at most maxChunkBytes,
// skipping devices deleted (or re-created) since the report came.
func (in *Ingest) writeStatuses(ctx context.Context, dirty map[string]pendingStatus) error {
	names := make([]string, 0, len(dirty))
	for n := range dirty {
		names = append(names, n)
	}
	for len(names) > 0 {
		n, size := 0, 0
		for n < len(names) && (n == 0 || size+len(dirty[names[n]].raw) < maxChunkBytes) {
			size += len(dirty[names[n]].raw)
			n++
		}
		chunk := names[:n]
		names = names[n:]
		_, err := in.opts.Store.Write(ctx, func(t *store.Txn) error {
			for _, name := range chunk {
				p := dirty[name]
				// DeviceUID answers from the store's in-memory index,
				// exact for this transaction: no read and decode of the
				// device object per report.
				if uid, ok := t.DeviceUID(name); !ok || p.uid != "" && uid != p.uid {
					continue
				}
				if err := t.Set(store.StatusKey(name), p.raw); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range chunk {
			delete(dirty, name)
		}
		if in.m != nil {
			in.m.StatusFlushes.Inc()
		}
	}
	return nil
}

// writeArch sets the fleet/arch label of devices whose agent reported an
// architecture their label does not have: one transaction per 256 devices,
// a write only where the label changes.
func (in *Ingest) writeArch(ctx context.Context, arch map[string]string) error {
	names := make([]string, 0, len(arch))
	for n := range arch {
		names = append(names, n)
	}
	for len(names) > 0 {
		chunk := names[:min(256, len(names))]
		names = names[len(chunk):]
		var set []string
		_, err := in.opts.Store.Write(ctx, func(t *store.Txn) error {
			set = set[:0]
			for _, name := range chunk {
				a := arch[name]
				o, err := t.GetObject(schema.KindDevice, name)
				if err != nil || o.GetMetadata().Labels[schema.LabelArch] == a {
					continue // deleted meanwhile, or already labelled
				}
				set = append(set, name)
				_, err = t.MutateObject(schema.KindDevice, name, func(o schema.Object) error {
					md := o.GetMetadata()
					if md.Labels == nil {
						md.Labels = map[string]string{}
					}
					md.Labels[schema.LabelArch] = a
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range set {
			in.log.Info("device architecture label set", "device", name, "arch", arch[name])
		}
		for _, name := range chunk {
			delete(arch, name)
		}
	}
	return nil
}

// writeCrashes stores the crash reports the model holds for the devices,
// in transactions of at most maxChunkBytes, skipping devices deleted (or
// re-created) since.
func (in *Ingest) writeCrashes(ctx context.Context, devices map[string]string) error {
	var names []string
	vals := make(map[string][]byte, len(devices))
	for name, uid := range devices {
		crs := in.model.CrashReports(name, uid)
		if len(crs) == 0 {
			continue
		}
		b, err := json.Marshal(crs)
		if err != nil {
			return fmt.Errorf("encode crash reports of %s: %w", name, err)
		}
		vals[name] = b
		names = append(names, name)
	}
	for len(names) > 0 {
		n, size := 0, 0
		for n < len(names) && (n == 0 || size+len(vals[names[n]]) < maxChunkBytes) {
			size += len(vals[names[n]])
			n++
		}
		chunk := names[:n]
		names = names[n:]
		_, err := in.opts.Store.Write(ctx, func(t *store.Txn) error {
			for _, name := range chunk {
				if uid, ok := t.DeviceUID(name); !ok || devices[name] != "" && uid != devices[name] {
					continue
				}
				if err := t.Set(store.CrashReportsKey(name), vals[name]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range chunk {
			delete(devices, name) // written: not requeued on a later failure
		}
	}
	return nil
}
