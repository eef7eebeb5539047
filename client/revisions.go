package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fleetmq/fleet/schema"
)

// DeploymentRevisions lists a deployment's revisions, the newest first
// (fleet rollout history).
func (c *Client) DeploymentRevisions(ctx context.Context, name string) ([]schema.DeploymentRevision, error) {
	if err := checkName(Deployments, name); err != nil {
		return nil, err
	}
	var l schema.DeploymentRevisionList
	if err := c.do(ctx, http.MethodGet, objectPath(Deployments, name)+"/revisions", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DeploymentRevision reads revision n of a deployment.
func (c *Client) DeploymentRevision(ctx context.Context, name string, n int64) (*schema.DeploymentRevision, error) {
	if err := checkName(Deployments, name); err != nil {
		return nil, err
	}
	var r schema.DeploymentRevision
	p := objectPath(Deployments, name) + "/revisions/" + strconv.FormatInt(n, 10)
	if err := c.do(ctx, http.MethodGet, p, nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// RollbackOptions tune Rollback.
type RollbackOptions struct {
	// ToRevision is the revision to go back to; 0 is the newest earlier
	// one that did not fail and was not rolled back.
	ToRevision int64
	// ResourceVersion, when set, must be the deployment's current one.
	ResourceVersion string
	// DryRun: the hub checks and answers, storing nothing.
	DryRun bool
}

// Rollback gives a deployment the pod template of an earlier revision
// (fleet rollout undo): an ordinary write of the deployment, which rolls
// out per its strategy.
func (c *Client) Rollback(ctx context.Context, name string, opts RollbackOptions) (*schema.RollbackResponse, error) {
	if err := checkName(Deployments, name); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.ResourceVersion != "" {
		q.Set("resourceVersion", opts.ResourceVersion)
	}
	if opts.DryRun {
		q.Set("dryRun", "server")
	}
	var out schema.RollbackResponse
	if err := c.do(ctx, http.MethodPost, objectPath(Deployments, name)+"/rollback", q, schema.RollbackRequest{ToRevision: opts.ToRevision}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateDeployment replaces a deployment's labels, annotations and spec.
// If d carries a resourceVersion it must be current, or the hub answers
// Conflict (IsConflict).
func (c *Client) UpdateDeployment(ctx context.Context, d *schema.Deployment) (*schema.Deployment, error) {
	return writeObject(ctx, c, http.MethodPut, Deployments, d.Metadata.Name, d)
}

// ModifyDeployment is ModifyDevice for a deployment: it reads deployment
// name, lets mutate change it and writes it back with the resourceVersion
// it was read at, reading and mutating again after a Conflict (fleet
// rollout pause, resume and restart use it). mutate reports whether it
// changed anything; when it did not, nothing is written.
func (c *Client) ModifyDeployment(ctx context.Context, name string, mutate func(*schema.Deployment) (bool, error)) (dep *schema.Deployment, written bool, err error) {
	return modify(ctx, c, "deployment", name, c.GetDeployment, func(ctx context.Context, d *schema.Deployment) (*schema.Deployment, error) {
		d.TypeMeta = schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDeployment}
		d.Status = nil
		return c.UpdateDeployment(ctx, d)
	}, mutate)
}
