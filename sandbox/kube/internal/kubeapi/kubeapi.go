// Package kubeapi holds the typed clients of the few Kubernetes resources
// kubernetes mode uses, over REST clients of their API groups (core/v1,
// coordination.k8s.io/v1, authorization.k8s.io/v1, authentication.k8s.io/v1)
// and a scheme of those types only: not the generated clientset, which
// registers every type of every group and more than doubles the binary.
package kubeapi

import (
	"errors"
	"fmt"
	"os"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/codeexec/codeexec/sandbox"
)

// Scheme holds the API types kubernetes mode uses, and only those;
// Codecs and ParamCodec serialize them.
var (
	Scheme     = runtime.NewScheme()
	Codecs     = serializer.NewCodecFactory(Scheme)
	ParamCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		coordinationv1.AddToScheme,
		authorizationv1.AddToScheme,
		authenticationv1.AddToScheme,
	} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
}

// Clients are the typed clients of the resources kubernetes mode touches,
// all in one namespace but the reviews.
type Clients struct {
	Config *rest.Config
	Core   rest.Interface // pods, and the URLs of pods/attach and pods/exec
	Pods   *gentype.ClientWithList[*corev1.Pod, *corev1.PodList]
	Leases *gentype.ClientWithList[*coordinationv1.Lease, *coordinationv1.LeaseList]
	Access *gentype.Client[*authorizationv1.SelfSubjectAccessReview]
	WhoAmI *gentype.Client[*authenticationv1.SelfSubjectReview]
	// Source says where the configuration came from, for messages.
	Source string
}

// LoadConfig finds the cluster: the file KUBECONFIG names when it is set,
// otherwise the pod's service account (in-cluster), otherwise
// ~/.kube/config. The error says what to set.
func LoadConfig() (*rest.Config, string, error) {
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("kubernetes: %w: KUBECONFIG=%s cannot be used: %v", sandbox.ErrSandboxUnavailable, kc, err)
		}
		return cfg, "KUBECONFIG=" + kc, nil
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, "the pod's service account (in-cluster)", nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, "", fmt.Errorf("kubernetes: %w: the in-cluster configuration cannot be used: %v", sandbox.ErrSandboxUnavailable, err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: %w: no cluster to use: run codeexec in a pod (it then uses its service account) or set KUBECONFIG to a kubeconfig file (%v)", sandbox.ErrSandboxUnavailable, err)
	}
	return cfg, rules.GetDefaultFilename(), nil
}

// New makes the REST clients of core/v1, coordination.k8s.io/v1,
// authorization.k8s.io/v1 and authentication.k8s.io/v1 over cfg, for
// namespace; source says where cfg came from.
func New(cfg *rest.Config, source, namespace string) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "codeexec"
	}
	// Each run creates and deletes a pod: client-go's default of 5
	// requests per second would make runs queue behind each other.
	cfg.QPS, cfg.Burst = 100, 200
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w: the client configuration from %s is not usable: %v", sandbox.ErrSandboxUnavailable, source, err)
	}
	group := func(gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = Codecs.WithoutConversion()
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	core, err := group(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	coord, err := group(coordinationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	authz, err := group(authorizationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	authn, err := group(authenticationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &Clients{
		Config: cfg,
		Core:   core,
		Pods: gentype.NewClientWithList("pods", core, ParamCodec, namespace,
			func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} }),
		Leases: gentype.NewClientWithList("leases", coord, ParamCodec, namespace,
			func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} }),
		Access: gentype.NewClient("selfsubjectaccessreviews", authz, ParamCodec, "",
			func() *authorizationv1.SelfSubjectAccessReview { return &authorizationv1.SelfSubjectAccessReview{} }),
		WhoAmI: gentype.NewClient("selfsubjectreviews", authn, ParamCodec, "",
			func() *authenticationv1.SelfSubjectReview { return &authenticationv1.SelfSubjectReview{} }),
		Source: source,
	}, nil
}
