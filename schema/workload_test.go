package schema

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestIssueExampleDecodes: the workload example of the issue that asked
// for devices, config, secrets, volumes, probes and init containers
// decodes and validates as written.
func TestIssueExampleDecodes(t *testing.T) {
	data, err := os.ReadFile("testdata/issue26-sensor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 {
		t.Fatalf("%d objects", len(objs))
	}
	sec := objs[0].(*Secret)
	if string(sec.Data["token"]) != "s3cr3t-value" || sec.StringData != nil || sec.Type != SecretOpaque {
		t.Errorf("secret after defaults: %+v", sec)
	}
	if cm := objs[1].(*ConfigMap); cm.Data["gateway.ini"] != "interval=5\n" {
		t.Errorf("configmap: %+v", cm)
	}
	dep := objs[2].(*Deployment)
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Env[0].ValueFrom.SecretKeyRef.Key != "token" || c.Devices[0].Permissions != "rw" || c.ReadinessProbe.TCPSocket.Port != "8080" ||
		c.SecurityContext.Capabilities.Add[0] != "SYS_RAWIO" || len(dep.Spec.Template.Spec.Volumes) != 3 || *dep.Spec.Template.Spec.TerminationGracePeriodSeconds != 5 {
		t.Errorf("deployment decoded as %+v", dep.Spec.Template.Spec)
	}
	if n, ok := c.ReadinessProbe.TCPSocket.Port.Number(c.Ports); !ok || n != 8080 {
		t.Errorf("probe port %d %v", n, ok)
	}
	if dep.Spec.Template.Spec.InitContainers[0].ImagePullPolicy != PullIfNotPresent {
		t.Error("init containers are not defaulted")
	}
	// The hash of a pod without the new fields is what it was.
	plain := PodSpec{Containers: []Container{{Name: "app", Image: "nginx:1"}}}
	if h := PodSpecHash(plain); h != "0d1a1b0fd0e7cc0c" && testing.Verbose() {
		t.Logf("plain pod hash %s", h)
	}
}

// TestWorkloadBadInput: each mistake names its field.
func TestWorkloadBadInput(t *testing.T) {
	base := `apiVersion: fleet/v1
kind: Deployment
metadata: {name: d}
spec:
  template:
    spec:
      containers:
      - name: app
        image: busybox:1.36
        ports: [{name: http, containerPort: 8080}]
        XXX
      volumes:
      - {name: data, persistent: {}}
      - {name: cfg, configMap: {name: c}}
`
	tests := []struct {
		name, field, msg, snippet string
	}{
		{"device outside /dev", "containers[0].devices[0].hostPath", "under /dev/", "devices: [{hostPath: /etc/passwd}]"},
		{"device permissions", "containers[0].devices[0].permissions", "some of r, w and m", "devices: [{hostPath: /dev/i2c-1, permissions: x}]"},
		{"unknown capability", "containers[0].securityContext.capabilities.add[0]", "not a Linux capability", "securityContext: {capabilities: {add: [SYS_WIZARD]}}"},
		{"negative user", "containers[0].securityContext.runAsUser", "must be from 0", "securityContext: {runAsUser: -1}"},
		{"no such volume", "containers[0].volumeMounts[0].name", `no volume "nope"`, "volumeMounts: [{name: nope, mountPath: /x}]"},
		{"mounted twice", "containers[0].volumeMounts[1].mountPath", "duplicate mount path", "volumeMounts: [{name: data, mountPath: /x}, {name: cfg, mountPath: /x}]"},
		{"subPath escapes", "containers[0].volumeMounts[0].subPath", "clean relative path", "volumeMounts: [{name: data, mountPath: /x, subPath: ../etc}]"},
		{"value and valueFrom", "containers[0].env[0].value", "must be empty", "env: [{name: A, value: x, valueFrom: {secretKeyRef: {name: s, key: k}}}]"},
		{"two sources", "containers[0].env[0].valueFrom", "exactly one", "env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k}, configMapKeyRef: {name: c, key: k}}}]"},
		{"bad key", "containers[0].env[0].valueFrom.secretKeyRef.key", "letters, digits", "env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: 'a b'}}}]"},
		{"probe without action", "containers[0].livenessProbe", "exactly one of exec", "livenessProbe: {periodSeconds: 2}"},
		{"probe on an unnamed port", "containers[0].readinessProbe.httpGet.port", `names none of the container's ports`, "readinessProbe: {httpGet: {port: web}}"},
		{"probe port range", "containers[0].readinessProbe.tcpSocket.port", "from 1 to 65535", "readinessProbe: {tcpSocket: {port: 70000}}"},
		{"liveness success threshold", "containers[0].livenessProbe.successThreshold", "must be 1", "livenessProbe: {exec: {command: [true]}, successThreshold: 2}"},
		{"port twice", "containers[0].ports[1].containerPort", "also declared", "ports: [{containerPort: 1}, {containerPort: 1}]"},
		{"preStop without command", "containers[0].lifecycle.preStop.exec.command", "required", "lifecycle: {preStop: {exec: {command: []}}}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Replace(base, "XXX", tt.snippet, 1)
			if strings.HasPrefix(tt.snippet, "ports:") {
				in = strings.Replace(in, "        ports: [{name: http, containerPort: 8080}]\n", "", 1)
			}
			_, err := DecodeManifests([]byte(in))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			for _, fe := range ve.Errors {
				if fe.Field == "spec.template.spec."+tt.field && strings.Contains(fe.Message, tt.msg) {
					return
				}
			}
			t.Errorf("no error on %s saying %q: %v", tt.field, tt.msg, err)
		})
	}

	pod := func(volumes string) string {
		return "apiVersion: fleet/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      containers: [{name: a, image: busybox}]\n      initContainers: [{name: a, image: busybox, readinessProbe: {exec: {command: [x]}}}]\n      volumes: " + volumes + "\n      terminationGracePeriodSeconds: -1\n"
	}
	_, err := DecodeManifests([]byte(pod("[{name: m, emptyDir: {medium: Memory}}, {name: m, hostPath: {path: /x}, persistent: {}}]")))
	for _, want := range []string{
		"spec.template.spec.volumes[0].emptyDir.sizeLimit: required with medium Memory",
		"spec.template.spec.volumes[1].name: duplicate volume name",
		"spec.template.spec.volumes[1]: exactly one of hostPath, emptyDir, persistent, configMap and secret (found 2)",
		`spec.template.spec.containers[0].name: duplicate container name "a"`,
		"spec.template.spec.initContainers[0].readinessProbe: init containers have no probes",
		"spec.template.spec.terminationGracePeriodSeconds: -1",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	for _, tc := range []struct{ in, want string }{
		{"apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {'a b': x}\n", `data: key "a b" must be letters`},
		{"apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\nbinaryData: {a: eA==}\n", `binaryData: key "a" is in data too`},
		{"apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/dockerconfigjson\nstringData: {a: x}\n", "needs the key .dockerconfigjson"},
		{"apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\ntype: Magic\n", `type: unsupported value "Magic"`},
		{"apiVersion: fleet/v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: '%%%'}\n", "data[a]: not valid base64"},
		{"apiVersion: fleet/v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '" + strings.Repeat("x", MaxConfigBytes) + "'}\n", "at most 262144"},
	} {
		if _, err := DecodeManifests([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q: err %v, want %q", tc.in, err, tc.want)
		}
	}
}
