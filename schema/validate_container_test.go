package schema

import (
	"strings"
	"testing"
)

// TestValidateContainerMessages pins the field path and text of every
// problem validateContainer reports, in the order it reports them: the
// CLI's golden outputs and the API's 400 bodies carry them verbatim.
func TestValidateContainerMessages(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	app := func() Container { return Container{Name: "app", Image: "nginx:1"} }
	cases := []struct {
		name string
		pod  func(p *PodSpec)
		want string
	}{
		{"valid", func(p *PodSpec) {}, ""},
		{"identity", func(p *PodSpec) {
			p.Containers[0] = Container{Name: "Bad_Name", Image: "UPPER:::", ImagePullPolicy: "Sometimes", WorkingDir: "rel"}
			p.Containers = append(p.Containers, Container{Name: "Bad_Name"}, app(), app())
		}, `spec.containers[0].name: "Bad_Name" must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit
spec.containers[0].image: "UPPER:::" is not a valid image reference: invalid reference format: repository name (library/UPPER) must be lowercase
spec.containers[0].imagePullPolicy: unsupported value "Sometimes": want IfNotPresent or Always
spec.containers[0].workingDir: must be an absolute path
spec.containers[1].name: "Bad_Name" must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit
spec.containers[1].image: required
spec.containers[3].name: duplicate container name "app"`},
		{"env", func(p *PodSpec) {
			p.Containers[0].Env = []EnvVar{
				{Name: ""}, {Name: "1x"}, {Name: "A"}, {Name: "A"},
				{Name: "B", Value: "v", ValueFrom: &EnvVarSource{ConfigMapKeyRef: &KeySelector{Name: "cm", Key: "k"}}},
				{Name: "C", ValueFrom: &EnvVarSource{}},
			}
			p.Containers[0].EnvFrom = []EnvFromSource{
				{}, {ConfigMapRef: &ObjectRef{Name: "a"}, SecretRef: &ObjectRef{Name: "b"}},
				{ConfigMapRef: &ObjectRef{Name: "Bad"}}, {SecretRef: &ObjectRef{Name: ""}, Prefix: "1-"},
			}
		}, `spec.containers[0].env[0].name: required
spec.containers[0].env[1].name: "1x" must start with a letter or '_' and contain only letters, digits, '_', '-' or '.'
spec.containers[0].env[3].name: duplicate variable "A"
spec.containers[0].env[4].value: must be empty when valueFrom is set
spec.containers[0].env[5].valueFrom: exactly one of configMapKeyRef and secretKeyRef
spec.containers[0].envFrom[0]: exactly one of configMapRef and secretRef
spec.containers[0].envFrom[1]: exactly one of configMapRef and secretRef
spec.containers[0].envFrom[2].configMapRef.name: "Bad" must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit
spec.containers[0].envFrom[3].secretRef.name: required
spec.containers[0].envFrom[3].prefix: "1-" must start with a letter or '_' and contain only letters, digits, '_', '-' or '.'`},
		{"mounts", func(p *PodSpec) {
			p.Volumes = []Volume{{Name: "cfg", ConfigMap: &ConfigMapVolume{Name: "cm"}}, {Name: "data", EmptyDir: &EmptyDirVolume{}}}
			p.Containers[0].Mounts = []Mount{{HostPath: "", MountPath: "rel"}, {HostPath: "/a/../b", MountPath: "/m"}}
			p.Containers[0].VolumeMounts = []VolumeMount{
				{Name: "", MountPath: "/m"}, {Name: "nope", MountPath: "/n"},
				{Name: "cfg", MountPath: "/c", SubPath: "x"}, {Name: "data", MountPath: "/d", SubPath: "../x"},
			}
		}, `spec.containers[0].mounts[0].hostPath: required
spec.containers[0].mounts[0].mountPath: "rel" must be an absolute path
spec.containers[0].mounts[1].hostPath: "/a/../b" must be a clean path (no '..', '//' or trailing '/')
spec.containers[0].volumeMounts[0].name: required: the name of one of the pod's volumes
spec.containers[0].volumeMounts[0].mountPath: duplicate mount path "/m" (also spec.containers[0].mounts[1].mountPath)
spec.containers[0].volumeMounts[1].name: no volume "nope" in spec.volumes
spec.containers[0].volumeMounts[2].subPath: a configMap or secret volume is mounted whole: files under a subPath are not updated; use items
spec.containers[0].volumeMounts[3].subPath: "../x" must be a clean relative path inside the volume (no '..', '//' or trailing '/')`},
		{"devices", func(p *PodSpec) {
			p.Containers[0].Devices = []DeviceMapping{
				{HostPath: "/tmp/x", Permissions: "x"}, {HostPath: "/dev/a", ContainerPath: "rel"},
				{HostPath: "/dev/b", ContainerPath: "/dev/tmpx"}, {HostPath: "/dev/tmpx"}, {HostPath: ""},
			}
		}, `spec.containers[0].devices[0].hostPath: "/tmp/x" must be a device node under /dev/
spec.containers[0].devices[0].permissions: "x": want some of r, w and m, in that order (rw, rwm, r)
spec.containers[0].devices[1].containerPath: "rel" must be an absolute path
spec.containers[0].devices[3].containerPath: duplicate device path "/dev/tmpx"
spec.containers[0].devices[4].hostPath: required`},
		{"security", func(p *PodSpec) {
			p.Containers[0].SecurityContext = &SecurityContext{
				Capabilities: &Capabilities{Add: []string{"NET_ADMIN", "FOO", "ALL"}, Drop: []string{"ALL", "BAR"}},
				RunAsUser:    i64(-1), RunAsGroup: i64(maxID + 1),
			}
			c := app()
			c.Name = "other"
			c.SecurityContext = &SecurityContext{}
			p.Containers = append(p.Containers, c)
		}, `spec.containers[0].securityContext.capabilities.add[1]: "FOO" is not a Linux capability (such as SYS_RAWIO, NET_ADMIN, SYS_TIME)
spec.containers[0].securityContext.capabilities.add[2]: "ALL" is not a Linux capability (such as SYS_RAWIO, NET_ADMIN, SYS_TIME)
spec.containers[0].securityContext.capabilities.drop[1]: "BAR" is not a Linux capability (such as NET_RAW, or ALL)
spec.containers[0].securityContext.runAsUser: -1: must be from 0 to 2147483647
spec.containers[0].securityContext.runAsGroup: 2147483648: must be from 0 to 2147483647`},
		{"ports", func(p *PodSpec) {
			p.Containers[0].Ports = []ContainerPort{
				{ContainerPort: 0}, {ContainerPort: 70000, Protocol: "SCTP"},
				{Name: "web", ContainerPort: 80}, {Name: "web", ContainerPort: 81}, {Name: "a-very-long-port-name", ContainerPort: 82},
				{Name: "Bad", ContainerPort: 83, Protocol: "UDP"}, {ContainerPort: 80, Protocol: "TCP"}, {ContainerPort: 80, Protocol: "UDP"},
			}
			c := app()
			c.Name = "other"
			c.Ports = []ContainerPort{{Name: "web", ContainerPort: 80}, {ContainerPort: 83, Protocol: "UDP"}}
			p.Containers = append(p.Containers, c)
			ic := app()
			ic.Name = "init"
			ic.Ports = []ContainerPort{{ContainerPort: 81}}
			p.InitContainers = []Container{ic}
		}, `spec.containers[0].ports[0].containerPort: 0: must be from 1 to 65535
spec.containers[0].ports[1].containerPort: 70000: must be from 1 to 65535
spec.containers[0].ports[1].protocol: unsupported value "SCTP": want TCP or UDP
spec.containers[0].ports[3].name: duplicate port name "web"
spec.containers[0].ports[3].containerPort: port 81/TCP is also declared by spec.initContainers[0].ports[0]: containers share the device's network
spec.containers[0].ports[4].name: "a-very-long-port-name" must be a DNS-1123 label of at most 15 characters
spec.containers[0].ports[5].name: "Bad" must be a DNS-1123 label of at most 15 characters
spec.containers[0].ports[6].containerPort: port 80/TCP is also declared by spec.containers[0].ports[2]: containers share the device's network
spec.containers[1].ports[0].containerPort: port 80/TCP is also declared by spec.containers[0].ports[2]: containers share the device's network
spec.containers[1].ports[1].containerPort: port 83/UDP is also declared by spec.containers[0].ports[5]: containers share the device's network`},
		{"probes and hooks", func(p *PodSpec) {
			bad := &Probe{}
			ok := &Probe{Exec: &ExecAction{Command: []string{"true"}}}
			p.Containers[0].LivenessProbe = bad
			p.Containers[0].ReadinessProbe = &Probe{TCPSocket: &TCPSocketAction{Port: "nope"}, SuccessThreshold: 2}
			p.Containers[0].StartupProbe = &Probe{Exec: &ExecAction{Command: []string{"true"}}, SuccessThreshold: 2}
			p.Containers[0].Lifecycle = &Lifecycle{PreStop: &LifecycleHandler{}}
			c := app()
			c.Name = "other"
			c.Lifecycle = &Lifecycle{PreStop: &LifecycleHandler{Exec: &ExecAction{}}}
			p.Containers = append(p.Containers, c)
			c = app()
			c.Name = "third"
			c.Lifecycle = &Lifecycle{}
			c.ReadinessProbe = ok
			p.Containers = append(p.Containers, c)
			ic := app()
			ic.Name = "init"
			ic.LivenessProbe, ic.ReadinessProbe, ic.StartupProbe = ok, ok, ok
			ic.Lifecycle = &Lifecycle{PreStop: &LifecycleHandler{}}
			p.InitContainers = []Container{ic}
		}, `spec.initContainers[0].livenessProbe: init containers have no probes: they run to completion
spec.initContainers[0].readinessProbe: init containers have no probes: they run to completion
spec.initContainers[0].startupProbe: init containers have no probes: they run to completion
spec.initContainers[0].lifecycle.preStop: init containers have no preStop hook
spec.containers[0].livenessProbe: exactly one of exec, httpGet and tcpSocket (found 0)
spec.containers[0].readinessProbe.tcpSocket.port: "nope" names none of the container's ports
spec.containers[0].startupProbe.successThreshold: 2: must be 1 for a liveness or startup probe
spec.containers[0].lifecycle.preStop.exec.command: required: the command to run before the container stops
spec.containers[1].lifecycle.preStop.exec.command: required: the command to run before the container stops`},
		{"resources", func(p *PodSpec) {
			p.Containers[0].Resources.Limits = ResourceList{Memory: "lots", CPU: "fast"}
			c := app()
			c.Name = "other"
			c.Resources.Limits = ResourceList{Memory: "1Mi", CPU: "0"}
			p.Containers = append(p.Containers, c)
			c = app()
			c.Name = "third"
			c.Resources.Limits = ResourceList{Memory: "4Mi", CPU: "1m"}
			p.Containers = append(p.Containers, c)
		}, `spec.containers[0].resources.limits.memory: quantity "lots" is malformed: want a number with an optional suffix such as 64Mi or 500m
spec.containers[0].resources.limits.cpu: quantity "fast" is malformed: want a number with an optional suffix such as 64Mi or 500m
spec.containers[1].resources.limits.memory: "1Mi" is below the 4Mi minimum a container needs
spec.containers[1].resources.limits.cpu: "0" must be at least 1m`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PodSpec{Containers: []Container{app()}}
			tc.pod(&p)
			var errs errList
			validatePodSpec(&p, "spec", &errs)
			var got []string
			for _, fe := range errs {
				got = append(got, fe.String())
			}
			if g := strings.Join(got, "\n"); g != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", g, tc.want)
			}
		})
	}
}
