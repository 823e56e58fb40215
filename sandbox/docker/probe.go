package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

// probeLimits bound the one container that New runs to find the interpreters.
var probeLimits = sandbox.Limits{
	Timeout:       60 * time.Second,
	MemoryBytes:   512 << 20,
	CPUs:          1,
	Processes:     64,
	OpenFiles:     256,
	FileSizeBytes: 16 << 20,
	OutputBytes:   256 << 10,
}

// probe runs one short container that finds the interpreters of the enabled
// languages and the uid code runs as. It sets r.interps and returns the
// status of every known language.
func (r *Runner) probe(ctx context.Context) ([]sandbox.LanguageStatus, error) {
	script := runproto.ProbeScript(r.cfg.Languages)
	if r.cfg.Workspace != nil {
		script += workspaceProbe
	}
	spec := containerSpec{role: roleProbe, cmd: []string{"/bin/sh", "-c", script}, limits: probeLimits, deadline: runDeadline(time.Now(), probeLimits.Timeout)}
	s, err := r.start(ctx, spec, "")
	if err != nil {
		return nil, fmt.Errorf("docker: probing the interpreters in %s: %w", r.cfg.Image, err)
	}
	res, err, _ := r.exchange(ctx, s, strings.NewReader(""), probeLimits, nil, nil, false)
	r.discard(s)
	if err != nil {
		return nil, fmt.Errorf("docker: probing the interpreters in %s: %w", r.cfg.Image, err)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return nil, fmt.Errorf("docker: %w: the probe container of %s failed (exit %d): %s", sandbox.ErrSandboxUnavailable, r.cfg.Image, res.ExitCode, strings.TrimSpace(res.Stderr+res.Stdout))
	}
	return r.parseProbe(res.Stdout)
}

// parseProbe reads what runproto.ProbeScript printed.
func (r *Runner) parseProbe(out string) ([]sandbox.LanguageStatus, error) {
	p := runproto.ParseProbe(out, r.cfg.Image, r.cfg.Languages)
	if p.PackagesErr != nil {
		r.log.Warn("could not tell which python packages the image has", "err", p.PackagesErr)
	}
	r.interps = p.Interpreters
	if p.UID == "" {
		return nil, fmt.Errorf("docker: %w: the probe container of %s printed no uid", sandbox.ErrSandboxUnavailable, r.cfg.Image)
	}
	r.uid = p.UID
	r.relayPython = p.Python3
	if !p.EnvDefaultSignal {
		return nil, fmt.Errorf("docker: %w: the image %s lacks env --default-signal (GNU coreutils 8.31 or newer), which the run supervisor needs; use an image of Debian bookworm or newer (codeexec's own images are built anew from the Dockerfile embedded in codeexec after `docker image rm %s` and a restart)", sandbox.ErrSandboxUnavailable, r.cfg.Image, r.cfg.Image)
	}
	r.decideNetns(p.Localhost, p.NetIfs)
	warning, err := r.checkWorkspace(p.Other)
	if err != nil {
		return nil, err
	}
	r.workspaceWarning = warning
	return p.Languages, nil
}

// decideNetns keeps the runtime's own network namespace (ownNetns, which
// the probe ran with) when the probe found loopback alone and localhost
// resolving; otherwise containers get the engine's network sandbox (network
// mode none), which costs more CPU per container but needs nothing of the
// image.
func (r *Runner) decideNetns(localhost bool, netifs []string) {
	if !r.ownNetns {
		return
	}
	switch {
	case !slices.Equal(netifs, []string{"lo"}):
		// Never seen: the runtime made the namespace, so it holds only
		// its loopback. Should an engine do otherwise, its network stack
		// decides instead.
		r.ownNetns = false
		r.log.Warn("a probe container without the engine's network sandbox saw other interfaces than loopback; containers use network mode none", "interfaces", strings.Join(netifs, ","))
	case !localhost:
		r.ownNetns = false
		r.log.Warn("the image does not resolve localhost by itself (no nss-myhostname, see sandbox/docker/image/Dockerfile): each container gets the engine's network sandbox, which costs more CPU per container", "image", r.cfg.Image)
	}
}

// capabilities describes the protections in force, from what New found.
func (r *Runner) capabilities(langs []sandbox.LanguageStatus) sandbox.Capabilities {
	e := r.engine
	nonRoot := r.uid != "0"
	ps := []sandbox.Protection{
		{Name: "fresh container per run", Active: true, Detail: "each run gets a new container from " + r.cfg.Image + " that has run nothing before, removed after the run; leftovers are found by the label " + LabelManaged + " and removed"},
		{Name: "warm pool", Active: r.cfg.PoolSize > 0, Detail: poolDetail(r.cfg.PoolSize)},
		{Name: "network", Active: true, Detail: r.networkDetail()},
		{Name: "read-only root filesystem", Active: true, Detail: "the image's filesystem cannot be written"},
		{Name: "size-capped /tmp", Active: true, Detail: "/tmp is a tmpfs (" + tmpfsOptions + ") sized by the file size limit; /dev/shm is capped at the same size or 64 MiB"},
		{Name: "non-root user", Active: nonRoot, Detail: "code runs as uid " + r.uid},
		{Name: "capabilities dropped", Active: true, Detail: "CapDrop ALL"},
		{Name: "no-new-privileges", Active: true, Detail: "setuid binaries and file capabilities cannot raise privileges"},
		{Name: "seccomp", Active: e.seccomp && (!e.gvisor || e.gvisorSeccomp), Detail: seccompDetail(e)},
		{Name: "memory limit", Active: e.memoryLimit, Detail: memoryDetail(e)},
		{Name: "pids limit", Active: e.pidsLimit, Detail: pidsDetail(e)},
		{Name: "cpu limit", Active: e.cpuQuota, Detail: enforcedDetail(e.cpuQuota, "CPU bandwidth is capped with a CFS quota (NanoCPUs)")},
		{Name: "open files limit", Active: true, Detail: "ulimit nofile"},
		{Name: "file size limit", Active: true, Detail: "ulimit fsize"},
		{Name: "environment scrubbed", Active: true, Detail: "the container gets only PATH, HOME, LANG and TMPDIR; nothing of the server's environment"},
		{Name: "container logs off", Active: true, Detail: "output goes only to the attached stream, never to the engine's log files"},
		{Name: "runtime", Active: true, Detail: runtimeDetail(e)},
		{Name: "user namespace remapping", Active: e.userns, Detail: "uid 0 in a container maps to an unprivileged host uid (engine option userns-remap)"},
		{Name: "rootless engine", Active: e.rootless, Detail: "the engine itself runs without root on the host"},
		{Name: "engine", Active: true, Detail: fmt.Sprintf("Docker Engine %s, API %s, at %s, cgroup v%s (%s driver)", e.serverVersion, e.apiVersion, e.host, e.cgroupVersion, e.cgroupDriver)},
	}
	if e.apparmor {
		ps = append(ps, sandbox.Protection{Name: "apparmor", Active: true, Detail: "the engine's default AppArmor profile"})
	}
	if e.selinux {
		ps = append(ps, sandbox.Protection{Name: "selinux", Active: true, Detail: "SELinux labels enforced by the engine"})
	}
	var warnings []string
	if !e.memoryLimit {
		warnings = append(warnings, "the Docker Engine's cgroups do not enforce memory limits on this host: a program can use all of the host's memory")
	}
	if !e.pidsLimit {
		warnings = append(warnings, "the Docker Engine's cgroups do not enforce pids limits on this host: a fork bomb is bounded only by the timeout")
	}
	if !nonRoot {
		warnings = append(warnings, "code runs as root inside the container")
	}
	warnings = append(warnings, e.warnings...)
	if r.workspaceWarning != "" {
		warnings = append(warnings, r.workspaceWarning)
	}
	var ws *sandbox.WorkspaceStatus
	if w := r.cfg.Workspace; w != nil {
		ws = &sandbox.WorkspaceStatus{Path: sandbox.WorkspacePath, HostDir: w.Dir, Writable: w.Writable, Enforced: true,
			Detail: "a bind mount at " + sandbox.WorkspacePath + ifElse(w.Writable, ", read-write", ", read-only and not recursive (mounts below the folder are not carried over)") + "; code runs as uid " + r.uid + ", so the folder's permissions apply"}
	}
	runtime := e.runtime
	return sandbox.Capabilities{
		Mode: sandbox.ModeDocker,
		Isolation: sandbox.Isolation{
			Network:     true,
			Filesystem:  true,
			Identity:    nonRoot,
			Environment: true,
			Processes:   true,
		},
		Summary: "a fresh container per run (runtime " + runtime + "): no network, read-only root filesystem except a size-capped /tmp, " +
			"non-root user, all capabilities dropped, no-new-privileges, memory, CPU, pids and open-file limits; removed after the run",
		Languages:   langs,
		Protections: ps,
		Warnings:    warnings,
		Workspace:   ws,
		// A run with its own environment gets a container created for it.
		RunEnv: true,
	}
}

func ifElse(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func memoryDetail(e engineFacts) string {
	if !e.memoryLimit {
		return "not enforced: the engine reports no memory cgroup support"
	}
	if !e.swapLimit {
		return "memory is capped by a cgroup, but the engine cannot limit swap, so a program may use swap beyond the limit"
	}
	return "memory is capped by a cgroup, with no swap on top (MemorySwap = Memory); an OOM kill is reported as oom_killed"
}

func seccompDetail(e engineFacts) string {
	switch {
	case e.gvisorSeccomp:
		return "the engine's default seccomp profile, applied inside gVisor (runsc --oci-seccomp); gVisor also confines its own calls to the host kernel with a seccomp filter"
	case e.gvisor:
		return "not the engine's profile: gVisor's kernel serves the program's system calls (runsc applies the profile only with --oci-seccomp); gVisor confines its own calls to the host kernel with a seccomp filter"
	}
	return "the engine's default seccomp profile"
}

func pidsDetail(e engineFacts) string {
	if e.gvisor {
		return "gVisor's kernel enforces the process limit (RLIMIT_NPROC, threads included); the cgroup pids limit bounds gVisor itself on the host"
	}
	return enforcedDetail(e.pidsLimit, "the process limit is a cgroup pids limit")
}

func runtimeDetail(e engineFacts) string {
	if e.gvisor {
		return e.runtime + ": gVisor, a kernel in user space between the program and the host's kernel"
	}
	return e.runtime
}

func enforcedDetail(ok bool, what string) string {
	if ok {
		return what
	}
	return "not enforced: the engine reports no cgroup support for it"
}

func poolDetail(size int) string {
	if size <= 0 {
		return "off (CODE_EXEC_DOCKER_POOL_SIZE=0): each run waits for its container to be created and started"
	}
	return fmt.Sprintf("%d containers per language are created and started ahead of demand, locked down exactly like the others, "+
		"with the interpreter loaded and waiting for a program; each serves one run and is then removed", size)
}
