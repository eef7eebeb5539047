package schema

import (
	"cmp"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// KindInfo describes one kind of the API: what it is called, where the
// hub keeps and serves it, and its Go type. The store's keys, the API's
// routes, the client's collections, the CLI's resource types and fleet
// explain all read the table of kinds (Kinds), so that adding a kind is a
// row there and the kind's own type file.
type KindInfo struct {
	// Kind is the kind's name: the kind field of its manifests and the
	// name of its Go type ("Deployment").
	Kind string
	// Resource is the kind's plural, lower case. For a stored kind it is
	// the collection in URLs (/v1/deployments) and store keys; for every
	// kind it is the first name fleet get and fleet explain take.
	Resource string
	// Singular is the lower-case name of one object ("deployment"), as in
	// deployment/web.
	Singular string
	// ShortNames are the abbreviations the CLI takes and lists ("deploy").
	ShortNames []string
	// Aliases are further spellings the CLI takes without listing them
	// ("deploys").
	Aliases []string
	// ListKind is the kind of a list of objects of a stored kind
	// ("DeploymentList"); "" for a payload.
	ListKind string
	// New returns an empty object of a stored kind: one a manifest holds
	// and the hub stores and serves under /v1/{Resource}. It is nil for a
	// payload, a kind that travels only in MQTT messages and API answers.
	New func() Object
	// Type is the kind's Go struct.
	Type reflect.Type

	list func(objs []Object, resourceVersion string) any
}

// NewList returns the list of a stored kind that holds objs (each of the
// kind's type), as GET /v1/{Resource} answers it: apiVersion, kind
// (ListKind), metadata and items, encoded as the kind's list type is
// (DeploymentList). It is nil for a payload.
func (k KindInfo) NewList(objs []Object, resourceVersion string) any {
	if k.list == nil {
		return nil
	}
	return k.list(objs, resourceVersion)
}

// objectList is the list of a stored kind, as NewList makes it.
type objectList[T any] struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta `json:"metadata"`
	Items    []T      `json:"items"`
}

// Stored reports whether the kind is a stored resource, not a payload.
func (k KindInfo) Stored() bool { return k.New != nil }

// Names are the names the CLI takes and lists for the kind: its
// resource, its singular, then its short names.
func (k KindInfo) Names() []string {
	return slices.Concat([]string{k.Resource, k.Singular}, k.ShortNames)
}

// Is reports whether word is one of the kind's names or aliases, in any
// case.
func (k KindInfo) Is(word string) bool {
	return slices.ContainsFunc(slices.Concat(k.Names(), k.Aliases), func(n string) bool { return strings.EqualFold(n, word) })
}

// Doc is the doc comment of the kind's type, as plain text (see TypeDoc).
func (k KindInfo) Doc() string { return TypeDoc(k.Type.Name()) }

// kinds is the table of kinds: the stored resources, in the order the API
// lists them, then the payloads. Only the table names kinds; everything
// else reads it.
var kinds = []KindInfo{
	storedKind[Device](KindDevice, "devices", "device", []string{"dev"}, "devs"),
	storedKind[Deployment](KindDeployment, "deployments", "deployment", []string{"deploy"}, "deploys"),
	storedKind[ConfigMap](KindConfigMap, "configmaps", "configmap", []string{"cm"}),
	storedKind[Secret](KindSecret, "secrets", "secret", nil),
	storedKind[AgentRollout](KindAgentRollout, "agentrollouts", "agentrollout", []string{"ar"}),

	payloadKind[DesiredState](KindDesiredState, "desiredstates", "desiredstate"),
	payloadKind[DeviceStatus](KindDeviceStatus, "devicestatuses", "devicestatus"),
	payloadKind[Event](KindEvent, "events", "event", "ev"),
	payloadKind[Request](KindRequest, "requests", "request"),
	payloadKind[Response](KindResponse, "responses", "response"),
	payloadKind[TopReport](KindTopReport, "topreports", "topreport"),
	payloadKind[TopReportList](KindTopReportList, "topreportlists", "topreportlist"),
	payloadKind[CrashReportList](KindCrashReportList, "crashreportlists", "crashreportlist"),
	payloadKind[EnrollRequest](KindEnrollRequest, "enrollrequests", "enrollrequest"),
	payloadKind[EnrollResponse](KindEnrollResponse, "enrollresponses", "enrollresponse"),
	payloadKind[DeploymentRevision](KindDeploymentRevision, "deploymentrevisions", "deploymentrevision"),
}

// storedKind is the row of a stored kind, whose list kind is KindList.
func storedKind[T any, P interface {
	*T
	Object
}](kind, resource, singular string, short []string, aliases ...string) KindInfo {
	return KindInfo{
		Kind: kind, Resource: resource, Singular: singular, ShortNames: short, Aliases: aliases,
		ListKind: kind + "List",
		New:      func() Object { return P(new(T)) },
		Type:     reflect.TypeFor[T](),
		list: func(objs []Object, rv string) any {
			l := objectList[T]{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: kind + "List"}, Metadata: ListMeta{ResourceVersion: rv}, Items: make([]T, 0, len(objs))}
			for _, o := range objs {
				l.Items = append(l.Items, *o.(P))
			}
			return l
		},
	}
}

// payloadKind is the row of a payload kind.
func payloadKind[T any](kind, resource, singular string, short ...string) KindInfo {
	return KindInfo{Kind: kind, Resource: resource, Singular: singular, ShortNames: short, Type: reflect.TypeFor[T]()}
}

// Kinds returns the table of kinds: the stored resources, in the order the
// API lists them (devices, deployments, configmaps, secrets), then the
// payloads.
func Kinds() []KindInfo { return slices.Clone(kinds) }

// StoredKinds returns the stored kinds, in the order the API lists them.
func StoredKinds() []KindInfo {
	var out []KindInfo
	for _, k := range kinds {
		if k.Stored() {
			out = append(out, k)
		}
	}
	return out
}

// ListedKinds returns the stored kinds in the order Fleet lists them to
// people (fleet get's help, the error about a manifest's kind):
// Deployment, the kind they write most, first, then the table's order.
func ListedKinds() []KindInfo {
	out := StoredKinds()
	slices.SortStableFunc(out, func(a, b KindInfo) int {
		return cmp.Compare(rankListed(a), rankListed(b))
	})
	return out
}

func rankListed(k KindInfo) int {
	if k.Kind == KindDeployment {
		return 0
	}
	return 1
}

// LookupKind returns the row of a kind ("Deployment").
func LookupKind(kind string) (KindInfo, bool) {
	i := slices.IndexFunc(kinds, func(k KindInfo) bool { return k.Kind == kind })
	if i < 0 {
		return KindInfo{}, false
	}
	return kinds[i], true
}

// KindOfObject returns the row of the stored kind whose Go type obj
// points to (a *Device is a Device, whatever its kind field says).
func KindOfObject(obj Object) (KindInfo, bool) {
	t := reflect.TypeOf(obj)
	if t == nil || t.Kind() != reflect.Pointer {
		return KindInfo{}, false
	}
	i := slices.IndexFunc(kinds, func(k KindInfo) bool { return k.Stored() && k.Type == t.Elem() })
	if i < 0 {
		return KindInfo{}, false
	}
	return kinds[i], true
}

// KindOfResource returns the stored kind of a collection ("deployments").
func KindOfResource(resource string) (KindInfo, bool) {
	i := slices.IndexFunc(kinds, func(k KindInfo) bool { return k.Stored() && k.Resource == resource })
	if i < 0 {
		return KindInfo{}, false
	}
	return kinds[i], true
}

// NewObject returns an empty object of the stored kind, or nil for a
// payload or an unknown kind.
func NewObject(kind string) Object {
	if k, ok := LookupKind(kind); ok && k.Stored() {
		return k.New()
	}
	return nil
}

// DocumentedKinds returns the kinds the field documentation covers: the
// stored resources (Deployment, Device), then the payloads of the MQTT
// topics, each group by name.
func DocumentedKinds() []string {
	var stored, payloads []string
	for _, k := range kinds {
		if k.Stored() {
			stored = append(stored, k.Kind)
		} else {
			payloads = append(payloads, k.Kind)
		}
	}
	slices.Sort(stored)
	slices.Sort(payloads)
	return slices.Concat(stored, payloads)
}

// quotedKinds is `"Deployment", "Device", "ConfigMap" or "Secret"`: the
// stored kinds as the error about a manifest's kind lists them.
func quotedKinds() string {
	var q []string
	for _, k := range ListedKinds() {
		q = append(q, strconv.Quote(k.Kind))
	}
	return joinOr(q)
}

// joinOr joins words as a sentence lists alternatives: "a, b or c".
func joinOr(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
