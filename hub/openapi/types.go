package openapi

import (
	"reflect"

	"github.com/fleetmq/fleet/hub/api"
	"github.com/fleetmq/fleet/hub/dashboard"
	"github.com/fleetmq/fleet/hub/history"
	"github.com/fleetmq/fleet/schema"
)

// Root is a Go type the API reads or answers, and the name of its
// component schema (#/components/schemas/Name).
type Root struct {
	Name string
	Type reflect.Type
}

func root[T any](name string) Root { return Root{Name: name, Type: reflect.TypeFor[T]()} }

// Roots lists the types the paths refer to: every stored kind and its
// list (from schema's table of kinds, so a new kind needs no line here),
// then the other bodies and answers. The struct types they hold are
// added as they are met, named after their Go type (a type outside
// schema after its package: DashboardRow).
func Roots() []Root {
	var out []Root
	for _, k := range schema.StoredKinds() {
		out = append(out, Root{Name: k.Kind, Type: k.Type})
		if l := k.NewList(nil, ""); l != nil && k.ListKind != "" {
			out = append(out, Root{Name: k.ListKind, Type: reflect.TypeOf(l)})
		}
	}
	return append(out,
		root[schema.Status]("Status"),
		root[schema.WatchEvent]("WatchEvent"),
		root[schema.ApplyResponse]("ApplyResponse"),
		root[schema.DeploymentStatus]("DeploymentStatus"),
		root[schema.DeploymentRevision]("DeploymentRevision"),
		root[schema.DeploymentRevisionList]("DeploymentRevisionList"),
		root[schema.RollbackRequest]("RollbackRequest"),
		root[schema.RollbackResponse]("RollbackResponse"),
		root[schema.DeviceCredentials]("DeviceCredentials"),
		root[schema.DeviceBatch]("DeviceBatch"),
		root[schema.DeviceBatchResult]("DeviceBatchResult"),
		root[api.DeviceRekey]("DeviceRekey"),
		root[schema.DeviceCertificateRequest]("DeviceCertificateRequest"),
		root[schema.DeviceCertificate]("DeviceCertificate"),
		root[schema.HubInfo]("HubInfo"),
		root[schema.HubMemberList]("HubMemberList"),
		root[schema.CARotationStatus]("CARotationStatus"),
		root[schema.Credential]("Credential"),
		root[schema.CredentialList]("CredentialList"),
		root[schema.BootstrapTokenRequest]("BootstrapTokenRequest"),
		root[schema.BootstrapToken]("BootstrapToken"),
		root[schema.BootstrapTokenList]("BootstrapTokenList"),
		root[schema.AuditList]("AuditList"),
		root[schema.AuditVerification]("AuditVerification"),
		root[schema.EventList]("EventList"),
		root[schema.TopReport]("TopReport"),
		root[schema.TopReportList]("TopReportList"),
		root[schema.CrashReportList]("CrashReportList"),
		root[schema.TermSize]("TermSize"),
		root[schema.ExecExit]("ExecExit"),
		root[dashboard.Session]("DashboardSession"),
		root[dashboard.Summary]("DashboardSummary"),
		root[dashboard.Page]("DashboardPage"),
		root[history.Online]("DashboardHistoryOnline"),
		root[history.Device]("DashboardHistoryDevice"),
		root[history.Deployment]("DashboardHistoryDeployment"),
	)
}
