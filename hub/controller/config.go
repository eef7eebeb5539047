package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/fleetmq/fleet/hub/store"
	"github.com/fleetmq/fleet/schema"
)

// ConfigMaps and Secrets in desired states. A device's DesiredState
// carries every ConfigMap and Secret its pods use (PodRefs), each once,
// sorted by name, with Version = the object's resourceVersion; a Secret's
// values are sealed to the device's public key (sealSecret): the last one
// the device reported in its status, else the one it sent when it
// enrolled. A device with no known key gets no Secrets (its agent reports
// the pods that need them as waiting); a referenced object that does not
// exist is left out (the pod may mark it optional).
//
// Whether a device's state changed is decided on names, versions and key
// IDs (resolved.same), never on sealed bytes, which differ at every
// sealing. A Secret sealed for the previous desired state is reused while
// its version and the device's key stay the same, so a pass seals only
// what changed.
//
// One apply may write a Deployment and the Secrets and ConfigMaps it uses
// in one transaction, and the watch may hand the controller the
// Deployment's event before theirs: a pass between them would give the
// devices a pod whose Secret is missing (CreateContainerConfigError on
// the device until the next pass). So a Deployment event makes the next
// pass read what its template uses from the store first (noteUses,
// loadPending): a desired state never carries a pod with older
// configuration than the store had when the pod was written. A ConfigMap
// read so is newer than the events still queued for it, which are then
// ignored (readAt).

// configRefs names the ConfigMaps and Secrets pods use, each list sorted
// and without duplicates.
type configRefs struct {
	configMaps, secrets []string
}

// PodRefs returns the ConfigMaps and Secrets a pod spec uses: env
// valueFrom and envFrom of its containers and init containers, configMap
// and secret volumes, and imagePullSecrets; each once, sorted.
func PodRefs(p *schema.PodSpec) (configMaps, secrets []string) {
	cm, sec := map[string]bool{}, map[string]bool{}
	for _, cs := range [][]schema.Container{p.InitContainers, p.Containers} {
		for i := range cs {
			c := &cs[i]
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					cm[r.Name] = true
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					sec[r.Name] = true
				}
			}
			for _, f := range c.EnvFrom {
				if f.ConfigMapRef != nil {
					cm[f.ConfigMapRef.Name] = true
				}
				if f.SecretRef != nil {
					sec[f.SecretRef.Name] = true
				}
			}
		}
	}
	for _, v := range p.Volumes {
		if v.ConfigMap != nil {
			cm[v.ConfigMap.Name] = true
		}
		if v.Secret != nil {
			sec[v.Secret.SecretName] = true
		}
	}
	for _, r := range p.ImagePullSecrets {
		sec[r.Name] = true
	}
	delete(cm, "")
	delete(sec, "")
	return slices.Sorted(maps.Keys(cm)), slices.Sorted(maps.Keys(sec))
}

// configKey names a ConfigMap or Secret.
type configKey struct{ kind, name string }

// configState is the controller's copy of the ConfigMaps and Secrets (with
// their values) and of the public keys devices sent when they enrolled.
// It belongs to the Run goroutine.
type configState struct {
	configMaps map[string]*schema.ConfigMap
	secrets    map[string]*schema.Secret
	enrollKeys map[string]string
	// To read from the store at the next pass: Secrets (their events
	// carry no values), the enrollment keys of new devices, and the
	// ConfigMaps a changed Deployment uses.
	loadSecrets, loadKeys, loadConfigMaps map[string]bool
	// readAt is the store revision a ConfigMap was last read at by
	// loadPending: its events up to it are older than what is held.
	readAt map[string]uint64
	// refs caches the references of pods by hash.
	refs map[string]configRefs
}

func newConfigState() *configState {
	return &configState{
		configMaps:  map[string]*schema.ConfigMap{},
		secrets:     map[string]*schema.Secret{},
		enrollKeys:  map[string]string{},
		loadSecrets: map[string]bool{},
		loadKeys:    map[string]bool{},
		refs:        map[string]configRefs{},

		loadConfigMaps: map[string]bool{},
		readAt:         map[string]uint64{},
	}
}

// configSnapshot is what the loader reads of the configuration.
type configSnapshot struct {
	configMaps map[string]*schema.ConfigMap
	secrets    map[string]*schema.Secret
	enrollKeys map[string]string
}

// loadConfig reads the ConfigMaps, the Secrets with their values and the
// enrollment keys in the transaction.
func loadConfig(t *store.Txn) (configSnapshot, error) {
	s := configSnapshot{
		configMaps: map[string]*schema.ConfigMap{},
		secrets:    map[string]*schema.Secret{},
		enrollKeys: map[string]string{},
	}
	err := t.ListObjects(schema.KindConfigMap, func(o schema.Object) error {
		cm := o.(*schema.ConfigMap)
		s.configMaps[cm.Metadata.Name] = cm
		return nil
	})
	if err != nil {
		return s, err
	}
	err = t.ListSecretData(func(sec *schema.Secret) error {
		s.secrets[sec.Metadata.Name] = sec
		return nil
	})
	if err != nil {
		return s, err
	}
	err = t.Scan(store.DeviceKeyPrefix, func(key string, val []byte) error {
		s.enrollKeys[key[len(store.DeviceKeyPrefix):]] = string(val)
		return nil
	})
	return s, err
}

// replace installs a snapshot; a full pass follows, so nothing is pending.
func (cs *configState) replace(s configSnapshot) {
	cs.configMaps, cs.secrets, cs.enrollKeys = s.configMaps, s.secrets, s.enrollKeys
	clear(cs.loadSecrets)
	clear(cs.loadKeys)
	clear(cs.loadConfigMaps)
	clear(cs.readAt)
	clear(cs.refs)
}

// noteUses makes the next pass read, from the store, the ConfigMaps and
// Secrets a changed Deployment's template uses: their events may come
// after the Deployment's, even from the same transaction.
func (cs *configState) noteUses(d *schema.Deployment) {
	cms, secs := PodRefs(&d.Spec.Template.Spec)
	for _, n := range cms {
		cs.loadConfigMaps[n] = true
	}
	for _, n := range secs {
		cs.loadSecrets[n] = true
	}
}

// applyConfigMap applies a ConfigMap event.
func (cs *configState) applyConfigMap(ev store.Event, ch *changeSet, log *slog.Logger) {
	ch.configChanged(schema.KindConfigMap, ev.Name)
	if at, ok := cs.readAt[ev.Name]; ok {
		if ev.Revision <= at {
			return // what loadPending read is newer
		}
		delete(cs.readAt, ev.Name)
	}
	if ev.Type == store.EventDeleted {
		delete(cs.configMaps, ev.Name)
		return
	}
	var cm schema.ConfigMap
	if err := json.Unmarshal(ev.Object, &cm); err != nil {
		log.Error("configmap event does not decode", "configmap", ev.Name, "err", err)
		return
	}
	cs.configMaps[ev.Name] = &cm
}

// applySecret applies a Secret event: its values are read at the next
// pass (loadPending).
func (cs *configState) applySecret(ev store.Event, ch *changeSet) {
	ch.configChanged(schema.KindSecret, ev.Name)
	if ev.Type == store.EventDeleted {
		delete(cs.secrets, ev.Name)
		delete(cs.loadSecrets, ev.Name)
		return
	}
	cs.loadSecrets[ev.Name] = true
}

// applyDevice notes a device event: a new device may have sent a key when
// it enrolled; a deleted one's is gone.
func (cs *configState) applyDevice(ev store.Event) {
	switch ev.Type {
	case store.EventDeleted:
		delete(cs.enrollKeys, ev.Name)
		delete(cs.loadKeys, ev.Name)
	case store.EventAdded:
		cs.loadKeys[ev.Name] = true
	}
}

// loadPending reads the Secrets and enrollment keys the events since the
// last pass named, as the store has them now. What it could not read
// stays pending.
func (cs *configState) loadPending(ctx context.Context, st *store.Store) error {
	if len(cs.loadSecrets) == 0 && len(cs.loadKeys) == 0 && len(cs.loadConfigMaps) == 0 {
		return nil
	}
	secrets := map[string]*schema.Secret{}
	keys := map[string]string{}
	var cms map[string]*schema.ConfigMap
	var rev uint64
	err := st.View(ctx, func(t *store.Txn) error {
		rev = t.Revision()
		var err error
		if cms, err = readConfigMaps(t, cs.loadConfigMaps); err != nil {
			return err
		}
		for name := range cs.loadSecrets {
			s, err := t.GetSecretData(name)
			switch {
			case errors.Is(err, store.ErrNotFound):
				secrets[name] = nil
			case err != nil:
				return err
			default:
				secrets[name] = s
			}
		}
		for name := range cs.loadKeys {
			v, err := t.Get(store.DeviceKeyKey(name))
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return err
			default:
				keys[name] = string(v)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("controller: load secrets and device keys: %w", err)
	}
	for name, s := range secrets {
		if s == nil {
			delete(cs.secrets, name)
		} else {
			cs.secrets[name] = s
		}
	}
	for name := range cs.loadKeys {
		if k, ok := keys[name]; ok {
			cs.enrollKeys[name] = k
		} else {
			delete(cs.enrollKeys, name)
		}
	}
	for name, cm := range cms {
		if cm == nil {
			delete(cs.configMaps, name)
		} else {
			cs.configMaps[name] = cm
		}
		cs.readAt[name] = rev
	}
	clear(cs.loadSecrets)
	clear(cs.loadKeys)
	clear(cs.loadConfigMaps)
	return nil
}

// readConfigMaps reads the named ConfigMaps in the transaction; a missing
// one is nil.
func readConfigMaps(t *store.Txn, names map[string]bool) (map[string]*schema.ConfigMap, error) {
	out := make(map[string]*schema.ConfigMap, len(names))
	for name := range names {
		o, err := t.GetObject(schema.KindConfigMap, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			out[name] = nil
		case err != nil:
			return nil, err
		default:
			cm, ok := o.(*schema.ConfigMap)
			if !ok {
				return nil, fmt.Errorf("configmap %s: stored as %T", name, o)
			}
			out[name] = cm
		}
	}
	return out, nil
}

// podRefs returns what a pod uses, cached by its hash.
func (cs *configState) podRefs(p *schema.Pod) configRefs {
	if p.Hash != "" {
		if r, ok := cs.refs[p.Hash]; ok {
			return r
		}
	}
	var r configRefs
	r.configMaps, r.secrets = PodRefs(&p.Spec)
	if p.Hash != "" {
		if len(cs.refs) >= 4096 {
			clear(cs.refs) // old templates; the live ones come back
		}
		cs.refs[p.Hash] = r
	}
	return r
}

// refsOf returns what pods use, each once, sorted.
func (cs *configState) refsOf(pods []schema.Pod) configRefs {
	switch len(pods) {
	case 0:
		return configRefs{}
	case 1:
		return cs.podRefs(&pods[0])
	}
	var out configRefs
	for i := range pods {
		r := cs.podRefs(&pods[i])
		out.configMaps = append(out.configMaps, r.configMaps...)
		out.secrets = append(out.secrets, r.secrets...)
	}
	slices.Sort(out.configMaps)
	slices.Sort(out.secrets)
	out.configMaps = slices.Compact(out.configMaps)
	out.secrets = slices.Compact(out.secrets)
	return out
}

// uses reports whether pods use one of the changed objects.
func (cs *configState) uses(pods []schema.Pod, changed map[configKey]bool) bool {
	for i := range pods {
		r := cs.podRefs(&pods[i])
		for _, n := range r.configMaps {
			if changed[configKey{schema.KindConfigMap, n}] {
				return true
			}
		}
		for _, n := range r.secrets {
			if changed[configKey{schema.KindSecret, n}] {
				return true
			}
		}
	}
	return false
}

// resolved is what a device's pods use, as it exists now.
type resolved struct {
	configMaps []*schema.ConfigMap
	secrets    []*schema.Secret
	// key is the device's public key ("" if unknown: no Secrets), keyID
	// its schema.DeviceKeyID.
	key, keyID string
}

// resolve finds the objects a device's pods use.
func (w *desiredWriter) resolve(name string, pods []schema.Pod) resolved {
	refs := w.cfg.refsOf(pods)
	var r resolved
	for _, n := range refs.configMaps {
		if cm, ok := w.cfg.configMaps[n]; ok {
			r.configMaps = append(r.configMaps, cm)
		}
	}
	if len(refs.secrets) == 0 {
		return r
	}
	if r.key = w.deviceKey(name); r.key == "" {
		return r
	}
	r.keyID = schema.DeviceKeyID(r.key)
	for _, n := range refs.secrets {
		if s, ok := w.cfg.secrets[n]; ok {
			r.secrets = append(r.secrets, s)
		}
	}
	return r
}

// deviceKey is the public key a device's Secrets are sealed to: its bound
// key, as its report carries it (the status ingest lets into a report only
// the key bound at enrollment, at the first report, or after `fleet device
// rekey`: hub/ingest/keys.go), else the one it sent when it enrolled,
// else "". A key reported with a stolen token never gets here.
func (w *desiredWriter) deviceKey(name string) string {
	if d, ok := w.fleet.device(name); ok {
		if st, _ := w.fleet.deviceState(name, d.UID); st != nil && st.PublicKey != "" {
			return st.PublicKey
		}
	}
	return w.cfg.enrollKeys[name]
}

// same reports whether ds carries exactly these objects, at these
// versions, sealed to this key.
func (r resolved) same(ds *schema.DesiredState) bool {
	if ds == nil || len(ds.ConfigMaps) != len(r.configMaps) || len(ds.Secrets) != len(r.secrets) {
		return false
	}
	for i, cm := range r.configMaps {
		if got := ds.ConfigMaps[i]; got.Name != cm.Metadata.Name || got.Version != cm.Metadata.ResourceVersion {
			return false
		}
	}
	for i, s := range r.secrets {
		if got := ds.Secrets[i]; got.Name != s.Metadata.Name || got.Version != s.Metadata.ResourceVersion || got.KeyID != r.keyID {
			return false
		}
	}
	return true
}

// sameConfig reports whether two desired states carry the same ConfigMaps
// and Secrets: names, versions and key IDs.
func sameConfig(a, b *schema.DesiredState) bool {
	if len(a.ConfigMaps) != len(b.ConfigMaps) || len(a.Secrets) != len(b.Secrets) {
		return false
	}
	for i := range a.ConfigMaps {
		if a.ConfigMaps[i].Name != b.ConfigMaps[i].Name || a.ConfigMaps[i].Version != b.ConfigMaps[i].Version {
			return false
		}
	}
	for i := range a.Secrets {
		x, y := &a.Secrets[i], &b.Secrets[i]
		if x.Name != y.Name || x.Version != y.Version || x.KeyID != y.KeyID {
			return false
		}
	}
	return true
}

// build fills in ds's ConfigMaps and Secrets: Secrets prev carries at the
// same version and key are reused, the others sealed now. A Secret that
// cannot be sealed is left out and logged (its name, never a value).
func (w *desiredWriter) build(ds *schema.DesiredState, r resolved, prev *schema.DesiredState) {
	for _, cm := range r.configMaps {
		ds.ConfigMaps = append(ds.ConfigMaps, schema.ConfigMapData{
			Name: cm.Metadata.Name, Version: cm.Metadata.ResourceVersion,
			Data: cm.Data, BinaryData: cm.BinaryData,
		})
	}
	var old map[string]*schema.SealedSecret
	if prev != nil && len(prev.Secrets) > 0 {
		old = make(map[string]*schema.SealedSecret, len(prev.Secrets))
		for i := range prev.Secrets {
			old[prev.Secrets[i].Name] = &prev.Secrets[i]
		}
	}
	for _, s := range r.secrets {
		if o := old[s.Metadata.Name]; o != nil && o.Version == s.Metadata.ResourceVersion && o.KeyID == r.keyID {
			ds.Secrets = append(ds.Secrets, *o)
			continue
		}
		sealed, err := sealSecret(s, r.key, r.keyID, nil)
		if err != nil {
			w.log.Error("seal secret for device; left out of its desired state", "device", ds.Device, "secret", s.Metadata.Name, "err", err)
			continue
		}
		ds.Secrets = append(ds.Secrets, sealed)
	}
}

// configRecheck returns, sorted, the devices outside work whose
// ConfigMaps and Secrets may have changed: those whose pods use an object
// changed since the last pass (changed), and, among those that reported,
// the ones whose pods use a Secret (their key may be new).
func (w *desiredWriter) configRecheck(work map[string][]schema.Pod, changed map[configKey]bool, reported map[string]bool) []string {
	set := map[string]bool{}
	if len(changed) > 0 {
		for name, ds := range w.fleet.desiredStates() {
			if _, ok := work[name]; ok {
				continue
			}
			if _, ok := w.fleet.device(name); ok && w.cfg.uses(ds.Pods, changed) {
				set[name] = true
			}
		}
	}
	for name := range reported {
		if _, ok := work[name]; ok || set[name] {
			continue
		}
		ds := w.fleet.desired(name)
		if _, ok := w.fleet.device(name); !ok || ds == nil {
			continue
		}
		if len(w.cfg.refsOf(ds.Pods).secrets) > 0 {
			set[name] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
