package configs

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// namespaceName is what Kubernetes accepts as a namespace (an RFC 1123 label).
var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// validateKubernetes checks the CODE_EXEC_K8S_* settings, and refuses in
// kubernetes mode what it does not offer yet: packages and the workspace
// (sessions are simply not offered).
func (c *Config) validateKubernetes() []error {
	var errs []error
	check := func(ok bool, field string, value any, why string) {
		if !ok {
			errs = append(errs, Invalid(field, value, why))
		}
	}
	check(namespaceName.MatchString(c.K8sNamespace), "K8sNamespace", strconv.Quote(c.K8sNamespace), "it is not a namespace name")
	check(c.K8sPoolSize >= 0 && c.K8sPoolSize <= 64, "K8sPoolSize", c.K8sPoolSize, "it is out of range")
	check(c.K8sNetworkCheck == "refuse" || c.K8sNetworkCheck == "warn", "K8sNetworkCheck", c.K8sNetworkCheck, "unknown value")
	for _, a := range c.K8sNetworkCheckAddrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		h, p, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(p)
		if err != nil || perr != nil || n < 1 || n > 65535 || net.ParseIP(h) == nil {
			errs = append(errs, Invalid("K8sNetworkCheckAddrs", a, "it is not an IP address and a port"))
		}
	}
	if c.Sandbox != sandbox.ModeKubernetes {
		return errs
	}
	notYet := func(setting, what string) {
		errs = append(errs, fmt.Errorf("%s is not available with CODE_EXEC_SANDBOX=kubernetes yet: %s", setting, what))
	}
	if c.Packages {
		notYet("CODE_EXEC_PACKAGES=true", "runs in pods have the image's packages only; build them into the sandbox image, or use docker mode")
	}
	if c.Workspace != "" {
		notYet("CODE_EXEC_WORKSPACE", "a folder of this host cannot be given to pods on a cluster; put the files in the request's files argument")
	}
	return errs
}
