//go:build tools

// Package tools pins the Kubernetes commands that .ci/ensure-kubernetes.sh
// builds, so that go.mod and go.sum list everything they need. It is never
// compiled (the tools build tag is never set).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
