package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// ApplyResult is what Apply did to one object.
type ApplyResult struct {
	// Object is the object as stored (for a dry run: as it would be).
	Object schema.Object
	// Action is schema.ActionCreated, ActionConfigured or ActionUnchanged.
	Action string
}

// Get returns the stored object, or an error wrapping ErrNotFound. Like
// every read and write of the store, it returns a Secret without its
// values (keys and sizes only; see Txn.GetSecretData).
func (s *Store) Get(ctx context.Context, kind, name string) (schema.Object, error) {
	var obj schema.Object
	err := s.View(ctx, func(t *Txn) error {
		var err error
		obj, err = t.GetObject(kind, name)
		return err
	})
	return obj, err
}

// List returns every object of kind whose labels contain all of selector,
// sorted by name, and the revision the list was read at: a Watch from that
// revision misses nothing.
func (s *Store) List(ctx context.Context, kind string, selector map[string]string) ([]schema.Object, uint64, error) {
	var (
		objs []schema.Object
		rev  uint64
	)
	sel := schema.LabelSelector{MatchLabels: selector}
	err := s.View(ctx, func(t *Txn) error {
		rev = t.Revision()
		return t.ListObjects(kind, func(o schema.Object) error {
			if sel.Matches(o.GetMetadata().Labels) {
				objs = append(objs, o)
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	return objs, rev, nil
}

// ListRawNamed calls fn with the name and the stored JSON of every object
// of kind, in name order, and returns the revision it was read at. It
// decodes nothing, for the API's large lists (but Secrets, which it hands
// out without their values); raw is only valid during the call.
func (s *Store) ListRawNamed(ctx context.Context, kind string, fn func(name string, raw []byte) error) (uint64, error) {
	res, ok := ResourceForKind(kind)
	if !ok {
		return 0, fmt.Errorf("list %s: unknown kind: %w", kind, ErrNotFound)
	}
	prefix := objectPrefix(res)
	var rev uint64
	err := s.View(ctx, func(t *Txn) error {
		rev = t.Revision()
		return t.Scan(prefix, func(key string, val []byte) error {
			val, err := publicRaw(kind, val)
			if err != nil {
				return err
			}
			return fn(key[len(prefix):], val)
		})
	})
	if err != nil {
		return 0, err
	}
	return rev, nil
}

// ErrStopList, returned by the fn of ListRawNamedFrom, ends the listing
// early without an error.
var ErrStopList = errors.New("stop listing")

// ListRawNamedFrom is ListRawNamed from the first object whose name sorts
// after after ("" for the first), for the API's pages: fn returns
// ErrStopList once it has a page's worth. Each call reads the store as it
// is then (its own revision, returned).
func (s *Store) ListRawNamedFrom(ctx context.Context, kind, after string, fn func(name string, raw []byte) error) (uint64, error) {
	res, ok := ResourceForKind(kind)
	if !ok {
		return 0, fmt.Errorf("list %s: unknown kind: %w", kind, ErrNotFound)
	}
	prefix := objectPrefix(res)
	var rev uint64
	err := s.View(ctx, func(t *Txn) error {
		rev = t.Revision()
		return t.b.scanFrom(prefix, after, func(key string, val []byte) error {
			val, err := publicRaw(kind, val)
			if err != nil {
				return err
			}
			return fn(key[len(prefix):], val)
		})
	})
	if err != nil && !errors.Is(err, ErrStopList) {
		return 0, err
	}
	return rev, nil
}

// ListRevisionHeld reports, with an error wrapping ErrExpired, when a watch
// from rev could no longer be started: the changes since rev have left the
// event ring, so a listing begun at rev can no longer be completed by a
// watch from its revision.
func (s *Store) ListRevisionHeld(rev uint64) error {
	s.feed.mu.Lock()
	oldest := s.feed.complete
	s.feed.mu.Unlock()
	if rev < oldest {
		return fmt.Errorf("the listing's revision %d is older than the oldest revision still held, %d: %w", rev, oldest, ErrExpired)
	}
	return nil
}

// ListDevices is List for Devices.
func (s *Store) ListDevices(ctx context.Context, selector map[string]string) ([]schema.Device, uint64, error) {
	objs, rev, err := s.List(ctx, schema.KindDevice, selector)
	out := make([]schema.Device, 0, len(objs))
	for _, o := range objs {
		out = append(out, *o.(*schema.Device))
	}
	return out, rev, err
}

// ListDeployments is List for Deployments.
func (s *Store) ListDeployments(ctx context.Context, selector map[string]string) ([]schema.Deployment, uint64, error) {
	objs, rev, err := s.List(ctx, schema.KindDeployment, selector)
	out := make([]schema.Deployment, 0, len(objs))
	for _, o := range objs {
		out = append(out, *o.(*schema.Deployment))
	}
	return out, rev, err
}

// Create stores a new object; it fails with ErrAlreadyExists if one of the
// same kind and name exists. With dryRun nothing is stored.
func (s *Store) Create(ctx context.Context, obj schema.Object, dryRun bool) (schema.Object, error) {
	var out schema.Object
	_, err := s.write(ctx, dryRun, func(t *Txn) error {
		t.dryRun = dryRun
		var err error
		out, _, err = t.putObject(obj, modeCreate)
		return err
	})
	return out, err
}

// Update replaces the labels, annotations and spec of an existing object
// (ErrNotFound otherwise). If obj carries a resourceVersion it must be the
// current one, or the update fails with ErrConflict. An update that changes
// nothing writes nothing.
func (s *Store) Update(ctx context.Context, obj schema.Object, dryRun bool) (schema.Object, error) {
	var out schema.Object
	_, err := s.write(ctx, dryRun, func(t *Txn) error {
		t.dryRun = dryRun
		var err error
		out, _, err = t.putObject(obj, modeUpdate)
		return err
	})
	return out, err
}

// Apply creates the object or updates an existing one, and says which
// (schema.ActionCreated, ActionConfigured, ActionUnchanged). Applying what
// is already stored writes nothing and bumps neither generation nor
// resourceVersion.
func (s *Store) Apply(ctx context.Context, obj schema.Object, dryRun bool) (schema.Object, string, error) {
	res, err := s.ApplyAll(ctx, []schema.Object{obj}, dryRun)
	if err != nil {
		return nil, "", err
	}
	return res[0].Object, res[0].Action, nil
}

// ApplyAll applies every object in one transaction: all are stored or none.
func (s *Store) ApplyAll(ctx context.Context, objs []schema.Object, dryRun bool) ([]ApplyResult, error) {
	if err := checkDuplicates(objs); err != nil {
		return nil, err
	}
	var out []ApplyResult
	_, err := s.write(ctx, dryRun, func(t *Txn) error {
		t.dryRun = dryRun
		out = out[:0]
		for _, o := range objs {
			stored, action, err := t.putObject(o, modeApply)
			if err != nil {
				return err
			}
			out = append(out, ApplyResult{Object: stored, Action: action})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes an object and returns it as it was, with the revision of
// the deletion as its resourceVersion. A non-empty resourceVersion must be
// the current one (ErrConflict). Deleting a device also deletes its token
// and its last reported status.
func (s *Store) Delete(ctx context.Context, kind, name, resourceVersion string, dryRun bool) (schema.Object, error) {
	var out schema.Object
	_, err := s.write(ctx, dryRun, func(t *Txn) error {
		t.dryRun = dryRun
		var err error
		out, err = t.DeleteObject(kind, name, resourceVersion)
		return err
	})
	return out, err
}

// Mutate is the hub's own read-modify-write of an object (for example the
// fleet/arch label from an agent report). fn changes the object in place
// and may run more than once. The usual rules hold: nothing changed means
// nothing written; generation moves only with the spec; any change is a
// write with a new resourceVersion and a MODIFIED event. Name, uid and
// creationTimestamp cannot be changed. (Agent-reported status is not
// written through here: it lives under StatusKey and is not part of the
// object's resourceVersion, see hub/API.md.)
func (s *Store) Mutate(ctx context.Context, kind, name string, fn func(schema.Object) error) (schema.Object, error) {
	var out schema.Object
	_, err := s.Write(ctx, func(t *Txn) error {
		var err error
		out, err = t.MutateObject(kind, name, fn)
		return err
	})
	return out, err
}

// GetObject reads one object in the transaction.
func (t *Txn) GetObject(kind, name string) (schema.Object, error) {
	key := ObjectKey(kind, name)
	if key == "" {
		return nil, fmt.Errorf("get %s %q: unknown kind: %w", kind, name, ErrNotFound)
	}
	raw, err := t.Get(key)
	if err != nil {
		return nil, fmt.Errorf("get %s %q: %w", kind, name, ErrNotFound)
	}
	return decodeObject(kind, raw)
}

// ListObjects calls fn with every object of kind, in name order.
func (t *Txn) ListObjects(kind string, fn func(schema.Object) error) error {
	res, ok := ResourceForKind(kind)
	if !ok {
		return fmt.Errorf("list %s: unknown kind: %w", kind, ErrNotFound)
	}
	return t.Scan(objectPrefix(res), func(_ string, val []byte) error {
		o, err := decodeObject(kind, val)
		if err != nil {
			return err
		}
		return fn(o)
	})
}

// DeleteObject deletes one object in the transaction (see Store.Delete).
func (t *Txn) DeleteObject(kind, name, resourceVersion string) (schema.Object, error) {
	key := ObjectKey(kind, name)
	if key == "" {
		return nil, fmt.Errorf("delete %s %q: unknown kind: %w", kind, name, ErrNotFound)
	}
	prevRaw, err := t.Get(key)
	if err != nil {
		return nil, fmt.Errorf("delete %s %q: %w", kind, name, ErrNotFound)
	}
	obj, err := decodeObject(kind, prevRaw)
	if err != nil {
		return nil, err
	}
	md := obj.GetMetadata()
	if resourceVersion != "" && resourceVersion != md.ResourceVersion {
		return nil, fmt.Errorf("delete %s %q: resourceVersion %s is not the current %s: %w", kind, name, resourceVersion, md.ResourceVersion, ErrConflict)
	}
	if err := t.del(key); err != nil {
		return nil, err
	}
	if kind == schema.KindDevice {
		for _, k := range []string{TokenKey(name), StatusKey(name), DeviceKeyKey(name), DeviceRekeyKey(name), CrashReportsKey(name)} {
			if err := t.del(k); err != nil {
				return nil, err
			}
		}
	}
	if kind == schema.KindDeployment {
		if err := t.deleteRevisions(name); err != nil {
			return nil, err
		}
	}
	if !t.dryRun {
		md.ResourceVersion = strconv.FormatUint(t.Revision(), 10)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("delete %s %q: encode: %w", kind, name, err)
	}
	if prevRaw, err = publicRaw(kind, prevRaw); err != nil {
		return nil, err
	}
	t.Emit(Event{Type: EventDeleted, Kind: kind, Name: name, Object: raw, Prev: prevRaw})
	return obj, nil
}

// MutateObject is Store.Mutate inside a transaction.
func (t *Txn) MutateObject(kind, name string, fn func(schema.Object) error) (schema.Object, error) {
	key := ObjectKey(kind, name)
	if key == "" {
		return nil, fmt.Errorf("mutate %s %q: unknown kind: %w", kind, name, ErrNotFound)
	}
	prevRaw, err := t.Get(key)
	if err != nil {
		return nil, fmt.Errorf("mutate %s %q: %w", kind, name, ErrNotFound)
	}
	prev, err := t.s.decodeFull(kind, prevRaw)
	if err != nil {
		return nil, err
	}
	obj, err := t.s.decodeFull(kind, prevRaw)
	if err != nil {
		return nil, err
	}
	if err := fn(obj); err != nil {
		return nil, fmt.Errorf("mutate %s %q: %w", kind, name, err)
	}
	md, pmd := obj.GetMetadata(), prev.GetMetadata()
	*obj.GetTypeMeta() = *prev.GetTypeMeta()
	md.Name, md.UID, md.CreationTimestamp = pmd.Name, pmd.UID, pmd.CreationTimestamp
	md.Generation, md.ResourceVersion = pmd.Generation, pmd.ResourceVersion
	schema.Default(obj)
	hubLabels(obj, nil)
	if err := schema.Validate(obj); err != nil {
		return nil, fmt.Errorf("mutate: %w", err)
	}
	same, sameSpec, err := compare(obj, prev, true)
	if err != nil {
		return nil, err
	}
	if same {
		return public(prev), nil
	}
	if !sameSpec {
		md.Generation++
		if err := t.objectRevisions(obj, prev); err != nil {
			return nil, err
		}
	}
	return public(obj), t.storeObject(obj, prevRaw)
}

type putMode int

const (
	modeApply putMode = iota
	modeCreate
	modeUpdate
)

// putObject creates or updates one object per mode and returns it as
// stored (a Secret without its values), with the apply action.
func (t *Txn) putObject(in schema.Object, mode putMode) (schema.Object, string, error) {
	obj, err := cloneObject(in)
	if err != nil {
		return nil, "", err
	}
	tm, md := obj.GetTypeMeta(), obj.GetMetadata()
	kind, name := tm.Kind, md.Name
	schema.Default(obj)
	// Validate what the user sent before looking at what is stored, so an
	// invalid object fails the same way whether or not it exists.
	if err := schema.Validate(obj); err != nil {
		return nil, "", err
	}
	key := ObjectKey(kind, name)
	prevRaw, err := t.Get(key)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, "", err
	}
	switch {
	case mode == modeCreate && exists:
		return nil, "", fmt.Errorf("create %s %q: %w", kind, name, ErrAlreadyExists)
	case mode == modeUpdate && !exists:
		return nil, "", fmt.Errorf("update %s %q: %w", kind, name, ErrNotFound)
	case mode != modeCreate && md.ResourceVersion != "" && !exists:
		return nil, "", fmt.Errorf("apply %s %q: resourceVersion %s given but the object does not exist: %w", kind, name, md.ResourceVersion, ErrConflict)
	}
	var prev schema.Object
	if exists {
		// A Secret with its values: an unchanged one writes nothing.
		if prev, err = t.s.decodeFull(kind, prevRaw); err != nil {
			return nil, "", err
		}
		pmd := prev.GetMetadata()
		if mode != modeCreate && md.ResourceVersion != "" && md.ResourceVersion != pmd.ResourceVersion {
			return nil, "", fmt.Errorf("update %s %q: resourceVersion %s is not the current %s: %w", kind, name, md.ResourceVersion, pmd.ResourceVersion, ErrConflict)
		}
		md.UID, md.CreationTimestamp = pmd.UID, pmd.CreationTimestamp
		md.Generation, md.ResourceVersion = pmd.Generation, pmd.ResourceVersion
	} else {
		uid, err := newUUID()
		if err != nil {
			return nil, "", err
		}
		now := t.s.now().UTC().Truncate(time.Second)
		md.UID, md.CreationTimestamp, md.Generation, md.ResourceVersion = uid, &now, 1, ""
	}
	// Status belongs to the hub: keep what is stored, ignore what was sent.
	copyStatus(obj, prev)
	hubLabels(obj, prev)
	if exists {
		same, sameSpec, err := compare(obj, prev, false)
		if err != nil {
			return nil, "", err
		}
		if same {
			return public(prev), schema.ActionUnchanged, nil
		}
		if !sameSpec {
			md.Generation++
		}
	}
	if !exists || md.Generation != prev.GetMetadata().Generation {
		if err := t.objectRevisions(obj, prev); err != nil {
			return nil, "", err
		}
	}
	if err := t.storeObject(obj, prevRaw); err != nil {
		return nil, "", err
	}
	if exists {
		return public(obj), schema.ActionConfigured, nil
	}
	return public(obj), schema.ActionCreated, nil
}

// storeObject writes obj at the transaction's revision and queues its
// event; prevRaw is the stored form before (nil for a new object). A
// Secret's values are stored sealed, and its events carry its public form.
func (t *Txn) storeObject(obj schema.Object, prevRaw []byte) error {
	kind, md := obj.GetTypeMeta().Kind, obj.GetMetadata()
	rev, err := t.writeRevision()
	if err != nil {
		return err
	}
	if !t.dryRun {
		md.ResourceVersion = strconv.FormatUint(rev, 10)
	}
	raw, pub, err := t.s.encodeStored(obj)
	if err != nil {
		return fmt.Errorf("store %s %q: encode: %w", kind, md.Name, err)
	}
	if err := t.set(ObjectKey(kind, md.Name), raw); err != nil {
		return fmt.Errorf("store %s %q: %w", kind, md.Name, err)
	}
	typ := EventAdded
	if prevRaw != nil {
		typ = EventModified
	}
	if prevRaw, err = publicRaw(kind, prevRaw); err != nil {
		return err
	}
	t.Emit(Event{Type: typ, Kind: kind, Name: md.Name, Object: pub, Prev: prevRaw})
	return nil
}

// checkDuplicates refuses two objects of the same kind and name in one
// apply: the result would depend on their order.
func checkDuplicates(objs []schema.Object) error {
	seen := map[string]bool{}
	for _, o := range objs {
		if o == nil {
			return errors.New("apply: nil object")
		}
		k := o.GetTypeMeta().Kind + "/" + o.GetMetadata().Name
		if seen[k] {
			return &schema.ValidationError{
				Kind: o.GetTypeMeta().Kind, Name: o.GetMetadata().Name,
				Errors: []schema.FieldError{{Field: "metadata.name", Message: "the same object appears more than once in this apply"}},
			}
		}
		seen[k] = true
	}
	return nil
}
