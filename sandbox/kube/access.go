package kube

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
)

// permission is one thing codeexec must be allowed to do in its namespace.
type permission struct {
	group, resource, subresource, verb string
	why                                string
}

func (p permission) String() string {
	r := p.resource
	if p.subresource != "" {
		r += "/" + p.subresource
	}
	if p.group != "" {
		r += "." + p.group
	}
	return p.verb + " " + r
}

// permissions is everything kubernetes mode does with the API, and all that
// deploy/kubernetes/rbac.yaml grants (its Role lists the same).
var permissions = []permission{
	{"", "pods", "", "create", "to start a run's pod"},
	{"", "pods", "", "get", "to read a pod's state"},
	{"", "pods", "", "list", "to follow its pods and find leftovers"},
	{"", "pods", "", "watch", "to follow its pods"},
	{"", "pods", "", "delete", "to remove a pod after its run"},
	// WebSocket upgrades are GET requests, authorized as get and, since
	// Kubernetes 1.35, as create too; SPDY's are POST (create).
	{"", "pods", "attach", "create", "to feed a run and read its output"},
	{"", "pods", "attach", "get", "to attach over WebSocket"},
	{"", "pods", "exec", "create", "to kill a run's processes at once when it ends early (timeout, output cap, cancel), to run each call of a session, and to run the egress relay (CODE_EXEC_NETWORK=allowlist)"},
	{"", "pods", "exec", "get", "to do so over WebSocket"},
	{"coordination.k8s.io", "leases", "", "create", "to make the replica's Lease, the owner of its pods"},
	{"coordination.k8s.io", "leases", "", "get", "to renew the replica's Lease"},
	{"coordination.k8s.io", "leases", "", "update", "to renew the replica's Lease"},
	{"coordination.k8s.io", "leases", "", "list", "to find replicas that stopped"},
	{"coordination.k8s.io", "leases", "", "delete", "to remove the Lease of a replica that stopped"},
}

// checkAccess asks the API server, with SelfSubjectAccessReviews, whether
// the server's identity has every permission it needs in namespace, and
// fails naming each one it lacks.
func checkAccess(ctx context.Context, c *kubeapi.Clients, namespace string) error {
	var missing []string
	for _, p := range permissions {
		rev, err := c.Access.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.subresource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("kubernetes: %w: the API server at %s (from %s) did not answer whether codeexec may %s in namespace %s: %v",
				sandbox.ErrSandboxUnavailable, c.Config.Host, c.Source, p, namespace, err)
		}
		if !rev.Status.Allowed {
			missing = append(missing, fmt.Sprintf("%s (%s)", p, p.why))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("kubernetes: %w: %s may not %s in namespace %s: grant it in the Role bound to it (deploy/kubernetes/rbac.yaml has the full list)",
		sandbox.ErrSandboxUnavailable, whoAmI(ctx, c), strings.Join(missing, ", "), namespace)
}

// whoAmI names the identity the server talks to the API server as, or says
// where it came from when the API server does not say.
func whoAmI(ctx context.Context, c *kubeapi.Clients) string {
	rev, err := c.WhoAmI.Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || rev.Status.UserInfo.Username == "" {
		return "the identity of " + c.Source
	}
	return rev.Status.UserInfo.Username
}
