package kube

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// The tests make ServiceAccounts, Roles and RoleBindings with the
// cluster's admin identity (KUBECONFIG's).
func init() {
	if err := rbacv1.AddToScheme(kubeapi.Scheme); err != nil {
		panic(err)
	}
}

// adminREST is the cluster configuration KUBECONFIG names.
func adminREST(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubetest.Kubeconfig(t))
	if err != nil {
		kubetest.SkipOrFail(t, "KUBECONFIG cannot be used: %v", err)
	}
	return cfg
}

// serviceAccount makes a ServiceAccount in the runs' namespace bound to a
// Role that grants perms, and returns a configuration that talks to the
// API server as it (with a token of ten minutes) and its user name. The
// test's cleanup removes all three.
func serviceAccount(t *testing.T, perms []permission) (*rest.Config, string) {
	t.Helper()
	admin := adminREST(t)
	c, err := kubeapi.New(admin, "KUBECONFIG", DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(admin)
	gv := rbacv1.SchemeGroupVersion
	cfg.GroupVersion, cfg.APIPath, cfg.NegotiatedSerializer = &gv, "/apis", kubeapi.Codecs.WithoutConversion()
	rbac, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sas := gentype.NewClient("serviceaccounts", c.Core, kubeapi.ParamCodec, DefaultNamespace, func() *corev1.ServiceAccount { return &corev1.ServiceAccount{} })
	roles := gentype.NewClient("roles", rbac, kubeapi.ParamCodec, DefaultNamespace, func() *rbacv1.Role { return &rbacv1.Role{} })
	bindings := gentype.NewClient("rolebindings", rbac, kubeapi.ParamCodec, DefaultNamespace, func() *rbacv1.RoleBinding { return &rbacv1.RoleBinding{} })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "codeexec-access-test-" + newReplicaID()
	meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: "codeexec-tests"}}
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = bindings.Delete(ctx, name, metav1.DeleteOptions{})
		_ = roles.Delete(ctx, name, metav1.DeleteOptions{})
		_ = sas.Delete(ctx, name, metav1.DeleteOptions{})
	})
	role := &rbacv1.Role{ObjectMeta: meta}
	for _, p := range perms {
		res := p.resource
		if p.subresource != "" {
			res += "/" + p.subresource
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{p.group}, Resources: []string{res}, Verbs: []string{p.verb}})
	}
	if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: DefaultNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var tr authenticationv1.TokenRequest
	secs := int64(600)
	err = c.Core.Post().Namespace(DefaultNamespace).Resource("serviceaccounts").Name(name).SubResource("token").
		Body(&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}).Do(ctx).Into(&tr)
	if err != nil {
		t.Fatal(err)
	}
	as := &rest.Config{Host: admin.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: admin.CAFile, CAData: admin.CAData}}
	return as, "system:serviceaccount:" + DefaultNamespace + ":" + name
}

// TestStartNamesMissingPermission starts kubernetes mode as a
// ServiceAccount whose Role lacks pods/attach create: the start fails
// naming it and the account; with the Role that deploy/kubernetes/ grants
// (every permission the check asks for), it starts and runs code.
func TestStartNamesMissingPermission(t *testing.T) {
	missing := permission{"", "pods", "attach", "create", ""}
	var lacking []permission
	for _, p := range permissions {
		if p.group != missing.group || p.resource != missing.resource || p.subresource != missing.subresource || p.verb != missing.verb {
			lacking = append(lacking, p)
		}
	}
	cfg, user := serviceAccount(t, lacking)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := New(ctx, Config{REST: cfg, Image: kubetest.Image(), RuntimeClass: kubetest.RuntimeClass(), Logger: testLogger(t)})
	if err == nil {
		_ = r.Close()
		t.Fatal("New started without create on pods/attach")
	}
	if !errors.Is(err, sandbox.ErrSandboxUnavailable) || !strings.Contains(err.Error(), "may not create pods/attach") || !strings.Contains(err.Error(), user) ||
		strings.Contains(err.Error(), "create pods ") {
		t.Fatalf("New's error does not name exactly the missing permission and the account %s: %v", user, err)
	}
	t.Logf("New: %v", err)

	full, _ := serviceAccount(t, permissions)
	r2 := newRunner(t, Config{REST: full, Languages: []string{"python"}})
	res := run(t, r2, sandboxtest.Req("python", "print(2**64)"))
	if res.Stdout != "18446744073709551616\n" {
		t.Fatalf("a run as the fully granted account: %+v", res)
	}
}

// TestPermissionsMatchTheManifests checks that the Role of
// deploy/kubernetes/ grants what checkAccess asks for, and nothing else.
func TestPermissionsMatchTheManifests(t *testing.T) {
	role := roleOfManifests(t)
	var granted, asked []string
	for _, rule := range role.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					granted = append(granted, v+" "+res+"."+g)
				}
			}
		}
	}
	for _, p := range permissions {
		res := p.resource
		if p.subresource != "" {
			res += "/" + p.subresource
		}
		asked = append(asked, p.verb+" "+res+"."+p.group)
	}
	slices.Sort(granted)
	slices.Sort(asked)
	if !slices.Equal(granted, asked) {
		t.Fatalf("deploy/kubernetes/rbac.yaml grants\n%q\nkubernetes mode checks\n%q", granted, asked)
	}
}

// roleOfManifests reads the Role of deploy/kubernetes/rbac.yaml.
func roleOfManifests(t *testing.T) *rbacv1.Role {
	t.Helper()
	f, err := os.Open("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var obj struct {
			metav1.TypeMeta `json:",inline"`
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("no Role in deploy/kubernetes/rbac.yaml (%v)", err)
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "Role" {
			var role rbacv1.Role
			if err := json.Unmarshal(raw, &role); err != nil {
				t.Fatal(err)
			}
			return &role
		}
	}
}
