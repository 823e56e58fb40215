package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/packages"
)

// validatePackages checks the package settings: the index URLs parse, the
// sizes and the timeout are in range, at least one index is named when
// packages are on, and no package setting is given with packages off,
// where it would do nothing.
func (c *Config) validatePackages() []error {
	var errs []error
	if !c.Packages {
		for _, set := range []struct {
			field string
			on    bool
		}{{"PipIndexURL", c.PipIndexURL != ""}, {"NpmRegistry", c.NpmRegistry != ""}, {"PackagesCacheDir", c.PackagesCacheDir != ""}, {"PackagesAllow", len(c.PackagesAllow) > 0}} {
			if set.on {
				f, _ := fieldByName(set.field)
				errs = append(errs, fmt.Errorf("%s is set but CODE_EXEC_PACKAGES=false: it applies only with CODE_EXEC_PACKAGES=true", Prefix+f.Tag.Get("env")))
			}
		}
		return errs
	}
	if c.PipIndexURL == "" && c.NpmRegistry == "" {
		errs = append(errs, fmt.Errorf("CODE_EXEC_PACKAGES=true needs CODE_EXEC_PIP_INDEX_URL, CODE_EXEC_NPM_REGISTRY or both: the index packages come from is the operator's to name"))
	}
	for _, u := range []struct{ field, value string }{{"PipIndexURL", c.PipIndexURL}, {"NpmRegistry", c.NpmRegistry}} {
		if u.value == "" {
			continue
		}
		if _, _, err := packages.ParseIndexURL(u.value); err != nil {
			errs = append(errs, invalid(u.field, u.value, err.Error()))
		}
	}
	if _, err := egress.ParseAllowlist(c.PackagesAllow); err != nil {
		errs = append(errs, invalid("PackagesAllow", strings.Join(c.PackagesAllow, ","), err.Error()))
	}
	if c.PackagesCacheDir != "" && !filepath.IsAbs(c.PackagesCacheDir) {
		errs = append(errs, invalid("PackagesCacheDir", c.PackagesCacheDir, "it is not an absolute path"))
	}
	if c.PackagesCacheBytes < 16<<20 {
		errs = append(errs, invalid("PackagesCacheBytes", c.PackagesCacheBytes, "it is below 16m"))
	}
	if c.PackagesMaxBytes < 1<<20 || c.PackagesMaxBytes > c.PackagesCacheBytes {
		errs = append(errs, invalid("PackagesMaxBytes", c.PackagesMaxBytes, "it is out of range"))
	}
	if c.PackagesTimeout < time.Second || c.PackagesTimeout > time.Hour {
		errs = append(errs, invalid("PackagesTimeout", c.PackagesTimeout, "it is out of range"))
	}
	return errs
}

// PackagesCache is the package cache folder: CODE_EXEC_PACKAGES_CACHE_DIR,
// or codeexec-packages-UID in the system temporary directory.
func (c *Config) PackagesCache() string {
	if c.PackagesCacheDir != "" {
		return c.PackagesCacheDir
	}
	return filepath.Join(os.TempDir(), "codeexec-packages-"+strconv.Itoa(os.Geteuid()))
}

// PackagesIndex names the indexes of the install phase.
func (c *Config) PackagesIndex() packages.Index {
	return packages.Index{PipURL: c.PipIndexURL, NpmURL: c.NpmRegistry}
}

// PackagesPolicy is the egress policy of the install phase: the index
// host:ports, the destinations of CODE_EXEC_PACKAGES_ALLOW, and nothing
// else (see packages.IndexPolicy). Call it on a validated Config with
// packages on.
func (c *Config) PackagesPolicy() (egress.Policy, error) {
	pins, _ := egress.ParsePins(c.NetworkResolve)
	pol, err := packages.IndexPolicy([]string{c.PipIndexURL, c.NpmRegistry}, egress.PinnedResolver{Pins: pins, Next: egress.SystemResolver()}, packages.DefaultCaps)
	if err != nil || len(c.PackagesAllow) == 0 {
		return pol, err
	}
	pol.Allow, err = egress.ParseAllowlist(append(pol.Allow.Strings(), c.PackagesAllow...))
	return pol, err
}

// PackagesLimits are the limits of one install phase: the run limits with
// CODE_EXEC_PACKAGES_TIMEOUT, the file-size limit raised to
// CODE_EXEC_PACKAGES_MAX_BYTES, at least 1 GiB of memory, 256 processes and
// 4096 open files (pip and npm need more than a small program), and 1 MiB
// of output (of which an error keeps the tail).
func (c *Config) PackagesLimits() sandbox.Limits {
	l := c.Limits(c.PackagesTimeout)
	l.FileSizeBytes = int64(c.PackagesMaxBytes)
	l.MemoryBytes = max(l.MemoryBytes, 1<<30)
	l.Processes = max(l.Processes, 256)
	l.OpenFiles = max(l.OpenFiles, 4096)
	l.OutputBytes = 1 << 20
	return l
}
