package configs

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

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
			errs = append(errs, Invalid(u.field, u.value, err.Error()))
		}
	}
	if _, err := egress.ParseAllowlist(c.PackagesAllow); err != nil {
		errs = append(errs, Invalid("PackagesAllow", strings.Join(c.PackagesAllow, ","), err.Error()))
	}
	if c.PackagesCacheDir != "" && !filepath.IsAbs(c.PackagesCacheDir) {
		errs = append(errs, Invalid("PackagesCacheDir", c.PackagesCacheDir, "it is not an absolute path"))
	}
	if c.PackagesCacheBytes < 16<<20 {
		errs = append(errs, Invalid("PackagesCacheBytes", c.PackagesCacheBytes, "it is below 16m"))
	}
	if c.PackagesMaxBytes < 1<<20 || c.PackagesMaxBytes > c.PackagesCacheBytes {
		errs = append(errs, Invalid("PackagesMaxBytes", c.PackagesMaxBytes, "it is out of range"))
	}
	if c.PackagesTimeout < time.Second || c.PackagesTimeout > time.Hour {
		errs = append(errs, Invalid("PackagesTimeout", c.PackagesTimeout, "it is out of range"))
	}
	return errs
}
