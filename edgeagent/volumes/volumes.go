// Package volumes makes a pod's volumes on the device and turns its
// containers' volumeMounts into bind mounts for the runtime.
//
// Layout under the agent's state directory:
//
//	volumes/{pod}/{volume}/             persistent volumes: kept across pod
//	                                    updates, rollbacks, agent and
//	                                    containerd restarts
//	volumes/{pod}/.{volume}.retain      reclaimPolicy Retain was asked for
//	pods/{pod}/{hash}/volumes/{volume}/ emptyDir, configMap and secret
//	                                    volumes of one pod revision
//	pods/{pod}/{hash}/subpaths/{container}/{n}
//	                                    bind mounts of subPaths
//
// emptyDir volumes live as long as their pod revision (a restarted
// container finds its files; a new revision starts empty); medium Memory
// is a tmpfs of sizeLimit bytes mounted on the directory. On disk,
// sizeLimit is not enforced. Persistent volumes are removed once no
// revision of their pod is desired on the device any more (and none of
// its containers is left), unless reclaimPolicy is Retain; a volume a new
// revision no longer names stays until then, so a rollback finds it.
//
// configMap and secret volumes are written the way the kubelet writes
// them, so that a change reaches running containers in place, without a
// restart, and a reader never sees half of an update: the files go to a
// new directory ..{time}.{digest}, the symbolic link ..data is switched to
// it atomically (rename), and each file of the volume is a link to
// ..data/{file}. Containers mount them read-only. A secret volume is a
// tmpfs (mode 0755, files defaultMode, 0400 unless set) when the agent may
// mount one (root), else a directory under the state directory (0700).
// A subPath of an emptyDir or persistent volume is created when missing.
// Files of a configMap or secret volume belong to the volume's user when
// every container mounting it sets the same runAsUser (and runAsGroup),
// else to root.
//
// A subPath is opened inside its volume without following any symbolic
// link out of it, and refused when it ends in a symbolic link; the opened
// directory or file is bind-mounted on pods/.../subpaths/..., the path
// the container mounts. A workload that swaps a directory of its volume
// for a link to /etc between the check and the mount therefore mounts
// nothing of the host.
//
// The tmpfs and bind mounts are made in the agent's mount namespace,
// which must be containerd's (the systemd unit's is). They do not survive
// a reboot; Mounts, called again before each container start, makes them
// again.
package volumes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fleetmq/fleet/edgeagent/podconfig"
	"github.com/fleetmq/fleet/schema"
)

// Files gives the content of configMap and secret volumes:
// *podconfig.Set.
type Files interface {
	ConfigMapFiles(*schema.ConfigMapVolume) ([]podconfig.File, error)
	SecretFiles(*schema.SecretVolume) ([]podconfig.File, error)
}

// Mounter mounts and unmounts file systems. The default is the kernel's
// (root, or CAP_SYS_ADMIN); tests pass a fake.
type Mounter interface {
	// MountTmpfs mounts a tmpfs of at most size bytes, root directory
	// mode mode, on dir.
	MountTmpfs(dir string, size int64, mode fs.FileMode) error
	// Bind bind-mounts source on target.
	Bind(source, target string) error
	// Unmount detaches what is mounted on target.
	Unmount(target string) error
	// MountsUnder lists the mount points at dir and below it.
	MountsUnder(dir string) ([]string, error)
}

// Options configures a Manager.
type Options struct {
	// StateDir is the agent's state directory. Required.
	StateDir string
	// Logger receives what the Manager does (default: discard).
	Logger *slog.Logger
	// Mounter mounts (default: the kernel).
	Mounter Mounter
}

// Manager makes and removes the volumes of the pods on one device. Its
// methods are safe for concurrent use.
type Manager struct {
	root    string
	log     *slog.Logger
	mounter Mounter

	mu       sync.Mutex
	failures map[string]string // volume dir → the last refresh error logged
	noTmpfs  bool              // a tmpfs mount failed once: secrets go to disk
	// empty: the last Collect found nothing under pods/ and volumes/, and
	// Mounts, the only maker of what is there, has made nothing since.
	// Collect then has nothing to read (a device without volumes).
	empty bool
}

// New returns a Manager.
func New(o Options) (*Manager, error) {
	if o.StateDir == "" {
		return nil, errors.New("volumes: no state directory")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Mounter == nil {
		o.Mounter = Kernel{}
	}
	root, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	return &Manager{root: root, log: o.Logger, mounter: o.Mounter, failures: map[string]string{}}, nil
}

// Pod is one revision of a pod.
type Pod struct {
	Name, Hash string
	Spec       *schema.PodSpec
}

// PersistentDir is where a pod's persistent volume lives.
func (m *Manager) PersistentDir(pod, volume string) string {
	return filepath.Join(m.root, "volumes", pod, volume)
}

// RevisionDir holds a pod revision's emptyDir, configMap and secret
// volumes and its subPath mounts.
func (m *Manager) RevisionDir(pod, hash string) string {
	return filepath.Join(m.root, "pods", pod, hash)
}

func (m *Manager) volumeDir(p Pod, volume string) string {
	return filepath.Join(m.RevisionDir(p.Name, p.Hash), "volumes", volume)
}

func retainMarker(podDir, volume string) string {
	return filepath.Join(podDir, "."+volume+".retain")
}

// Mounts makes every volume container c mounts (creating directories,
// mounting tmpfs, writing configMap and secret files, binding subPaths),
// all idempotent, and returns c's bind mounts in the order of its
// volumeMounts. Errors name the volume and what is missing (a ConfigMap,
// a hostPath); they never carry a value of a Secret.
func (m *Manager) Mounts(p Pod, c *schema.Container, files Files) ([]schema.Mount, error) {
	if len(c.VolumeMounts) == 0 {
		return nil, nil
	}
	if err := validName(p.Name); err != nil {
		return nil, err
	}
	if err := validName(p.Hash); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.empty = false
	mounts := make([]schema.Mount, 0, len(c.VolumeMounts))
	for i, vm := range c.VolumeMounts {
		v := findVolume(p.Spec, vm.Name)
		if v == nil {
			return nil, fmt.Errorf("volumeMounts[%d]: the pod has no volume %q", i, vm.Name)
		}
		src, err := m.ensure(p, v, files)
		if err != nil {
			return nil, err
		}
		ro := vm.ReadOnly || v.ConfigMap != nil || v.Secret != nil
		if vm.SubPath != "" {
			target := filepath.Join(m.RevisionDir(p.Name, p.Hash), "subpaths", c.Name, fmt.Sprint(i))
			if src, err = m.subPath(src, target, vm.SubPath, v); err != nil {
				return nil, fmt.Errorf("volume %s: subPath %q: %w", v.Name, vm.SubPath, err)
			}
		}
		mounts = append(mounts, schema.Mount{HostPath: src, MountPath: vm.MountPath, ReadOnly: ro})
	}
	return mounts, nil
}

func findVolume(spec *schema.PodSpec, name string) *schema.Volume {
	if spec == nil {
		return nil
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// validName refuses what cannot be one path element (names come
// validated; this is defence in depth for paths built from them).
func validName(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return fmt.Errorf("volumes: %q cannot name a directory", s)
	}
	return nil
}

// ensure makes volume v of p and returns its directory on the host.
func (m *Manager) ensure(p Pod, v *schema.Volume, files Files) (string, error) {
	if err := validName(v.Name); err != nil {
		return "", err
	}
	switch {
	case v.HostPath != nil:
		if _, err := os.Stat(v.HostPath.Path); err != nil {
			return "", fmt.Errorf("volume %s: hostPath %s: %w", v.Name, v.HostPath.Path, err)
		}
		return v.HostPath.Path, nil
	case v.EmptyDir != nil:
		dir := m.volumeDir(p, v.Name)
		if err := m.makeDir(dir, 0o777); err != nil {
			return "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if v.EmptyDir.Medium == "Memory" {
			size, err := schema.ParseMemory(v.EmptyDir.SizeLimit)
			if err != nil || size <= 0 {
				return "", fmt.Errorf("volume %s: emptyDir medium Memory needs a sizeLimit", v.Name)
			}
			if err := m.ensureTmpfs(dir, size, 0o777); err != nil {
				return "", fmt.Errorf("volume %s: emptyDir medium Memory: %w", v.Name, err)
			}
		}
		return dir, nil
	case v.Persistent != nil:
		podDir := filepath.Join(m.root, "volumes", p.Name)
		dir := filepath.Join(podDir, v.Name)
		if err := m.makeDir(dir, 0o777); err != nil {
			return "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
		marker := retainMarker(podDir, v.Name)
		if v.Persistent.ReclaimPolicy == schema.ReclaimRetain {
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				return "", fmt.Errorf("volume %s: remember reclaimPolicy Retain: %w", v.Name, err)
			}
		} else if err := os.Remove(marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
		return dir, nil
	case v.ConfigMap != nil, v.Secret != nil:
		dir := m.volumeDir(p, v.Name)
		if err := m.makeDir(dir, 0o755); err != nil {
			return "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if v.Secret != nil {
			m.secretTmpfs(dir)
		}
		if err := m.project(p, v, dir, files); err != nil {
			return "", err
		}
		return dir, nil
	}
	return "", fmt.Errorf("volume %s: no source (hostPath, emptyDir, persistent, configMap or secret)", v.Name)
}

// makeDir creates dir (and its parents, 0700) with mode, whatever the
// umask; an existing dir keeps its mode (the workload may have changed
// it).
func (m *Manager) makeDir(dir string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	err := os.Mkdir(dir, mode)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// mounted reports whether something is mounted on dir.
func (m *Manager) mounted(dir string) (bool, error) {
	points, err := m.mounter.MountsUnder(dir)
	if err != nil {
		return false, err
	}
	return slices.Contains(points, dir), nil
}

func (m *Manager) ensureTmpfs(dir string, size int64, mode fs.FileMode) error {
	ok, err := m.mounted(dir)
	if err != nil {
		return fmt.Errorf("check mounts: %w", err)
	}
	if ok {
		return nil
	}
	if err := m.mounter.MountTmpfs(dir, size, mode); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// secretTmpfs mounts a tmpfs on a secret volume's directory, so that its
// files never reach the disk. The agent (not the container, which mounts
// it read-only) is its only writer, so the size only bounds the agent's
// own mistakes: room for twice the largest Secret in 1024 files. When
// mounting is impossible (not root), the files stay on disk under the
// state directory, 0700.
func (m *Manager) secretTmpfs(dir string) {
	if m.noTmpfs {
		return
	}
	size := int64(2 * (schema.MaxConfigBytes + 1024*os.Getpagesize()))
	if err := m.ensureTmpfs(dir, size, 0o755); err != nil {
		m.noTmpfs = true
		m.log.Warn("cannot mount a tmpfs for secret volumes; their files go to the state directory (0700) instead", "err", err)
	}
}

// project writes the files of a configMap or secret volume when they
// differ from what the volume holds.
func (m *Manager) project(p Pod, v *schema.Volume, dir string, files Files) error {
	var (
		fl  []podconfig.File
		err error
	)
	if v.ConfigMap != nil {
		fl, err = files.ConfigMapFiles(v.ConfigMap)
	} else {
		fl, err = files.SecretFiles(v.Secret)
	}
	if err != nil {
		return fmt.Errorf("volume %s: %w", v.Name, err)
	}
	uid, gid := volumeOwner(p.Spec, v.Name)
	changed, err := writeProjected(dir, fl, uid, gid)
	if err != nil {
		return fmt.Errorf("volume %s: write files: %w", v.Name, err)
	}
	if changed {
		m.log.Info("volume files written", "pod", p.Name, "hash", p.Hash, "volume", v.Name, "files", len(fl))
	}
	return nil
}

// volumeOwner is the uid and gid the files of a volume get: those every
// container mounting it runs as, when they all say the same; else -1
// (root's).
func volumeOwner(spec *schema.PodSpec, volume string) (uid, gid int) {
	uid, gid = -1, -1
	first := true
	for _, list := range [][]schema.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			if !slices.ContainsFunc(c.VolumeMounts, func(vm schema.VolumeMount) bool { return vm.Name == volume }) {
				continue
			}
			u, g := -1, -1
			if sc := c.SecurityContext; sc != nil {
				if sc.RunAsUser != nil {
					u = int(*sc.RunAsUser)
				}
				if sc.RunAsGroup != nil {
					g = int(*sc.RunAsGroup)
				}
			}
			if first {
				uid, gid, first = u, g, false
				continue
			}
			if u != uid {
				uid = -1
			}
			if g != gid {
				gid = -1
			}
		}
	}
	return uid, gid
}

// Refresh rewrites the configMap and secret volumes of the given pod
// revisions that exist on the device (their containers were created)
// and whose content changed: running containers see the new files in
// place. A volume whose content cannot be had now (a ConfigMap deleted,
// a Secret sealed to another key) keeps its files; the error is logged
// once per change. It returns the volumes it rewrote, as "pod/volume".
func (m *Manager) Refresh(pods []Pod, files Files) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var updated []string
	for _, p := range pods {
		if p.Spec == nil || validName(p.Name) != nil || validName(p.Hash) != nil {
			continue
		}
		for i := range p.Spec.Volumes {
			v := &p.Spec.Volumes[i]
			if v.ConfigMap == nil && v.Secret == nil || validName(v.Name) != nil {
				continue
			}
			dir := m.volumeDir(p, v.Name)
			if _, err := os.Lstat(filepath.Join(dir, dataLink)); err != nil {
				continue // not made yet: the container's creation will
			}
			before := currentDigest(dir)
			err := m.project(p, v, dir, files)
			if err != nil {
				if m.failures[dir] != err.Error() {
					m.failures[dir] = err.Error()
					m.log.Warn("cannot update volume; it keeps its files", "pod", p.Name, "volume", v.Name, "err", err)
				}
				continue
			}
			delete(m.failures, dir)
			if currentDigest(dir) != before {
				updated = append(updated, p.Name+"/"+v.Name)
			}
		}
	}
	return updated
}

// Collect removes what the pods no longer need: the directories of each
// pod revision keepRevision does not keep (emptyDir, configMap and secret
// volumes, subPath mounts), and the persistent volumes of each pod that
// keepPod does not keep, except those whose reclaimPolicy is Retain.
// Mounts under a directory are detached first; a directory that still has
// one is left for a later call. It returns what it removed.
func (m *Manager) Collect(keepRevision func(pod, hash string) bool, keepPod func(pod string) bool) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.empty {
		return nil, nil
	}
	var removed []string
	var errs []error
	podsDir := filepath.Join(m.root, "pods")
	podNames := readDirNames(podsDir)
	for _, pod := range podNames {
		podDir := filepath.Join(podsDir, pod)
		left := 0
		for _, hash := range readDirNames(podDir) {
			if keepRevision(pod, hash) {
				left++
				continue
			}
			dir := filepath.Join(podDir, hash)
			if err := m.removeTree(dir); err != nil {
				errs = append(errs, err)
				left++
				continue
			}
			removed = append(removed, "pods/"+pod+"/"+hash)
		}
		if left == 0 {
			if err := os.Remove(podDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	volsDir := filepath.Join(m.root, "volumes")
	volPods := readDirNames(volsDir)
	for _, pod := range volPods {
		if keepPod(pod) {
			continue
		}
		podDir := filepath.Join(volsDir, pod)
		retained := 0
		for _, vol := range readDirNames(podDir) {
			if strings.HasPrefix(vol, ".") {
				continue
			}
			if _, err := os.Stat(retainMarker(podDir, vol)); err == nil {
				retained++
				continue
			}
			if err := m.removeTree(filepath.Join(podDir, vol)); err != nil {
				errs = append(errs, err)
				retained++
				continue
			}
			removed = append(removed, "volumes/"+pod+"/"+vol)
		}
		if retained == 0 {
			if err := m.removeTree(podDir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, r := range removed {
		m.log.Info("removed volume directory", "path", r)
	}
	m.empty = len(podNames) == 0 && len(volPods) == 0
	return removed, errors.Join(errs...)
}

// readDirNames lists the directories (and markers) in dir; a missing dir
// is empty.
func readDirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// removeTree detaches every mount at or below dir, deepest first, checks
// that none is left (RemoveAll would otherwise delete files of a mounted
// volume through its bind) and removes dir.
func (m *Manager) removeTree(dir string) error {
	points, err := m.mounter.MountsUnder(dir)
	if err != nil {
		return fmt.Errorf("remove %s: list mounts: %w", dir, err)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := m.mounter.Unmount(p); err != nil {
			return fmt.Errorf("remove %s: unmount %s: %w", dir, p, err)
		}
	}
	if left, err := m.mounter.MountsUnder(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("remove %s: still mounted: %v %v", dir, left, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// digestFiles identifies the content of a projected volume.
func digestFiles(files []podconfig.File, uid, gid int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%d\n", uid, gid)
	for _, f := range files {
		fmt.Fprintf(h, "%q %o %d\n", f.Path, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
