package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
)

// probeIsolation lists Linux's kernel isolation as unavailable and sets
// up Seatbelt: each program runs under a profile of its own
// (seatbelt.go), once a probe showed, on this Mac, that a program under
// such a profile reads and writes its run directory but is refused
// everything else it tries. Until then, and where it fails, sandbox_info
// says why Seatbelt is not active.
func (r *Runner) probeIsolation(ctx context.Context, disabled []Feature, uid int) (executor.Isolation, []sandbox.Protection) {
	ps := linuxOnlyProtections()
	r.shield = notShielded()
	sb := &seatbeltRuns{readOnly: interpreterRoots(r.interp), network: slices.Contains(disabled, FeatureNetwork)}
	p := sandbox.Protection{Name: protectionName(FeatureSeatbelt)}
	if slices.Contains(disabled, FeatureSeatbelt) {
		p.Detail = "turned off by CODE_EXEC_PROCESS_DISABLE"
		return executor.Isolation{}, append(ps, p)
	}
	switch err := r.probeSeatbelt(ctx, sb); {
	case err != nil:
		p.Detail = "unavailable: " + err.Error()
		r.log.Warn("process mode: Seatbelt profiles are unavailable: runs can read and write what the server's user can, and reach the network", "err", err)
	default:
		r.seatbelt = sb
		p.Active, p.Detail = true, seatbeltDetail(sb)
		r.shield = sandbox.Protection{Name: "server out of reach", Active: true, Detail: "the Seatbelt profile lets a program see and signal only the processes of its own sandbox and read no other process's arguments or environment (kern.procargs2)"}
	}
	return executor.Isolation{}, append(ps, p)
}

// seatbeltDetail says what the profile of sb allows, for sandbox_info.
func seatbeltDetail(sb *seatbeltRuns) string {
	net := "no network (not even the host's loopback; with CODE_EXEC_NETWORK=allowlist, only the run's own port of codeexec's egress proxy)"
	if sb.network {
		net = "the network as for any program of the user (CODE_EXEC_PROCESS_DISABLE=network)"
	}
	return "each program runs under a Seatbelt profile of its own (sandbox-exec), checked at start: reads of the system's folders, the interpreters' installations, the run directory and the workspace only (not the home folder, other users' files or /Volumes); writes to the run directory (and a read-write workspace) only; " +
		net + "; no keychain, pasteboard or window server"
}

// tryIsolation has nothing to try on macOS: probeSeatbelt checks the
// profile.
func (r *Runner) tryIsolation(ctx context.Context, iso executor.Isolation) error { return nil }

// probeSeatbelt runs codeexec's probe helper under the profile of a run
// (with the codeexec binary readable), as a run is started (the exec
// stage, its rlimits, sandbox-exec), and checks that it could read and
// write its run directory and was refused a file outside it, a listing of
// the home folder, a write outside it and a connection to a port that the
// server listens on.
func (r *Runner) probeSeatbelt(ctx context.Context, sb *seatbeltRuns) error {
	if _, err := os.Stat(executor.SandboxExec); err != nil {
		return fmt.Errorf("no %s: %w", executor.SandboxExec, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the codeexec binary: %w", err)
	}
	exe = realPath(exe)
	dir, err := os.MkdirTemp(r.root, "probe-")
	if err != nil {
		return err
	}
	defer executor.RemoveAll(dir)
	outside, err := os.MkdirTemp(r.root, "probe-outside-")
	if err != nil {
		return err
	}
	defer executor.RemoveAll(outside)
	probe := executor.SeatbeltProbe{
		ReadRun:      filepath.Join(dir, "in.txt"),
		WriteRun:     filepath.Join(dir, "out.txt"),
		ReadOutside:  filepath.Join(outside, "secret.txt"),
		WriteOutside: filepath.Join(outside, "planted.txt"),
		Home:         seatbeltHome(),
	}
	for _, f := range []string{probe.ReadRun, probe.ReadOutside} {
		if err := os.WriteFile(f, []byte("probe\n"), 0o644); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for the probe's connection: %w", err)
	}
	defer ln.Close()
	go discardConnections(ln)
	probe.Connect = ln.Addr().String()
	withExe := *sb
	withExe.readOnly = append(slices.Clone(sb.readOnly), exe)
	profile, err := withExe.profile(executor.Isolation{}, dir, 0)
	if err != nil {
		return err
	}
	args := probe.Args()
	res := &sandbox.Result{}
	if err := executor.Spawn(ctx, executor.Spec{Path: exe, Args: args, Env: minimalEnv(dir, executor.MinimalPath), Dir: dir, Limits: probeLimits, Rlimits: true, Seatbelt: profile}, res); err != nil {
		return err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(res.Stderr)
		if msg == "" {
			msg = fmt.Sprintf("exit code %d", res.ExitCode)
		}
		return errors.New("the probe under the profile failed: " + msg)
	}
	var report map[string]string
	if err := json.Unmarshal([]byte(res.Stdout), &report); err != nil {
		return fmt.Errorf("the probe's report: %w (%q)", err, res.Stdout)
	}
	return checkSeatbeltProbe(report, sb.network)
}
