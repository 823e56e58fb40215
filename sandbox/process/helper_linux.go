//go:build linux

package process

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// helperAnswer bounds the run helper's answer to RunCoreIDArg.
const helperAnswer = 30 * time.Second

// FindHelper returns the run helper that runs may start instead of the
// binary exe: HelperName in exe's directory, when it is a regular file
// that only root or this server's user may change, built with the same Go,
// settings and module versions as exe (sameBuild), and whose run core is
// this binary's (it answers RunCoreIDArg with sandbox.RunCoreID).
// Otherwise it returns "" and why not ("" when there is no helper at all).
func FindHelper(exe string) (path, why string) {
	return findHelper(exe, sandbox.RunCoreID())
}

// findHelper is FindHelper with the run core's ID that the helper must say.
func findHelper(exe, runCoreID string) (path, why string) {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	path = filepath.Join(filepath.Dir(exe), HelperName)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", ""
	}
	if err != nil {
		return "", err.Error()
	}
	if why := trustedFile(fi); why != "" {
		return "", path + " " + why
	}
	self, err := buildinfo.ReadFile(exe)
	if err != nil {
		return "", fmt.Sprintf("reading the build of %s: %v", exe, err)
	}
	other, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Sprintf("reading the build of %s: %v", path, err)
	}
	if why := sameBuild(self, other); why != "" {
		return "", path + " " + why
	}
	ctx, cancel := context.WithTimeout(context.Background(), helperAnswer)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, executor.RunCoreIDArg)
	cmd.Env = []string{"PATH=" + executor.MinimalPath}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Sprintf("%s did not say which run core it has: %v", path, err)
	}
	if got, want := strings.TrimSpace(string(out)), runCoreID; got != want {
		return "", fmt.Sprintf("%s has another run core than codeexec (another version or other sources): %.12s, codeexec %.12s", path, got, want)
	}
	return path, ""
}

// trustedFile says why a file of fi may not be started for every run:
// not a regular file, owned by another user than root or this server's,
// or writable by its group or others. "" when it may.
func trustedFile(fi fs.FileInfo) string {
	if !fi.Mode().IsRegular() {
		return "is not a regular file"
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("may be changed by users other than its owner (mode %s)", fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Sprintf("belongs to uid %d, neither root nor this server's user (uid %d)", st.Uid, os.Geteuid())
	}
	return ""
}

// helperSettings are the build settings that change what the run core does
// and must match between codeexec and its helper.
var helperSettings = []string{"GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOEXPERIMENT", "CGO_ENABLED", "-tags", "-race", "-asan", "-msan"}

// sameBuild says why other (the helper's build) may not stand in for self
// (codeexec's): another Go release or module, other build settings, or a
// module it links at another version than self. "" when it may; the code
// of this module is compared apart (sandbox.RunCoreID).
func sameBuild(self, other *debug.BuildInfo) string {
	if self.GoVersion != other.GoVersion {
		return fmt.Sprintf("was built with %s, codeexec with %s", other.GoVersion, self.GoVersion)
	}
	if self.Main.Path != other.Main.Path {
		return fmt.Sprintf("comes from module %s, codeexec from %s", other.Main.Path, self.Main.Path)
	}
	ss, hs := settings(self), settings(other)
	for _, k := range helperSettings {
		if ss[k] != hs[k] {
			return fmt.Sprintf("was built with %s=%q, codeexec with %q", k, hs[k], ss[k])
		}
	}
	deps := map[string]*debug.Module{}
	for _, d := range self.Deps {
		deps[d.Path] = d
	}
	for _, d := range other.Deps {
		if s := deps[d.Path]; modString(s) != modString(d) {
			return fmt.Sprintf("links %s, codeexec %s", modString(d), modString(s))
		}
	}
	return ""
}

// settings are a build's settings by key.
func settings(bi *debug.BuildInfo) map[string]string {
	m := map[string]string{}
	for _, s := range bi.Settings {
		m[s.Key] = s.Value
	}
	return m
}

// modString names a module at its version, with its checksum and
// replacement; "no such module" for nil.
func modString(m *debug.Module) string {
	if m == nil {
		return "no such module"
	}
	s := m.Path + "@" + m.Version + " " + m.Sum
	if m.Replace != nil {
		s += " => " + modString(m.Replace)
	}
	return s
}
