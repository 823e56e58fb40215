package process

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/process/seatbelt"
)

// FeatureSeatbelt runs each program under a Seatbelt profile of its own
// (macOS): reads of the system, the interpreters and the run's folders
// only, writes to the run's writable folders only, no network but the
// egress proxy. It is not in Features, which are Linux's.
const FeatureSeatbelt Feature = "seatbelt"

// seatbeltRuns is how a Runner applies Seatbelt to its programs (macOS):
// nil where it does not.
type seatbeltRuns struct {
	// readOnly are the interpreters' installations (real paths), read by
	// every program besides seatbelt.SystemReadOnly.
	readOnly []string
	// network lets programs reach the network like any program of the
	// user (CODE_EXEC_PROCESS_DISABLE=network).
	network bool
}

// profile is the Seatbelt profile of a program of the run whose working
// directory is dir, with iso's binds (the workspace, the package folder,
// a session's control folder) and, when proxyPort is not 0, the egress
// proxy on that loopback port.
func (sb *seatbeltRuns) profile(iso executor.Isolation, dir string, proxyPort int) (string, error) {
	p := seatbelt.Policy{ReadOnly: slices.Clone(sb.readOnly), ReadWrite: []string{realPath(dir)}, ProxyPort: proxyPort}
	for _, b := range iso.Binds {
		if b.Writable {
			p.ReadWrite = append(p.ReadWrite, realPath(b.Src))
		} else {
			p.ReadOnly = append(p.ReadOnly, realPath(b.Src))
		}
	}
	src, err := p.Profile()
	if err != nil {
		return "", err
	}
	if sb.network {
		src += "; CODE_EXEC_PROCESS_DISABLE=network: the network as for any program of the user.\n(allow network* system-socket)\n(allow mach-lookup (global-name \"com.apple.dnssd.service\") (global-name \"com.apple.SystemConfiguration.DNSConfiguration\") (global-name \"com.apple.SystemConfiguration.configd\") (global-name \"com.apple.trustd.agent\"))\n"
	}
	return src, nil
}

// realPath is path with its symbolic links resolved, as Seatbelt matches
// paths (/var/folders/... is /private/var/folders/...); path itself, made
// clean, when it cannot be resolved.
func realPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return filepath.Clean(real)
	}
	return filepath.Clean(path)
}

// interpreterRoots are the installations of the interpreters outside the
// system's folders: for one whose binary is in a bin folder, the folder
// above it (its prefix: ~/.pyenv/versions/3.12.4, a Python.framework's
// Versions/3.12, ~/.nvm/versions/node/v22.1.0), which holds its standard
// library; the binary's own folder otherwise. Real paths, sorted.
func interpreterRoots(interp map[string]sandbox.Interpreter) []string {
	var out []string
	for _, in := range interp {
		p := realPath(in.Path)
		if slices.ContainsFunc(seatbelt.SystemReadOnly, func(d string) bool { return strings.HasPrefix(p, d+"/") }) {
			continue
		}
		dir := filepath.Dir(p)
		if filepath.Base(dir) == "bin" {
			dir = filepath.Dir(dir)
		}
		if dir != "/" {
			out = append(out, dir)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// seatbeltProbeWant is what the start-up probe must see under the
// profile: the run's own folder readable and writable, and everything
// else it tries refused.
var seatbeltProbeWant = map[string]string{
	executor.ProbeReadRun:      executor.ProbeOK,
	executor.ProbeWriteRun:     executor.ProbeOK,
	executor.ProbeReadOutside:  executor.ProbeRefused,
	executor.ProbeListHome:     executor.ProbeRefused,
	executor.ProbeWriteOutside: executor.ProbeRefused,
	executor.ProbeConnect:      executor.ProbeRefused,
}

// checkSeatbeltProbe compares the probe's report with seatbeltProbeWant
// and says what differs, or returns nil. With network (the profile allows
// the network), the probe's connection may succeed.
func checkSeatbeltProbe(report map[string]string, network bool) error {
	var wrong []string
	for _, check := range slices.Sorted(maps.Keys(seatbeltProbeWant)) {
		want := seatbeltProbeWant[check]
		if network && check == executor.ProbeConnect {
			continue
		}
		got, ok := report[check]
		if !ok {
			got = "not tried"
		}
		if got != want {
			wrong = append(wrong, fmt.Sprintf("%s: %s (want %s)", check, got, want))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("under the Seatbelt profile, %s", strings.Join(wrong, "; "))
	}
	return nil
}

// seatbeltHome is the user's home folder, which the probe must not list.
func seatbeltHome() string {
	if h, err := os.UserHomeDir(); err == nil {
		return h
	}
	return "/Users"
}

// discardConnections accepts the connections of ln and closes them, until
// ln is closed: a listener that the probe's connection must not reach.
func discardConnections(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}
