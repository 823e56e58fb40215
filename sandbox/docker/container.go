package docker

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
	"github.com/codeexec/codeexec/sandbox/internal/warmpool"
)

// containerSpec says what a locked-down container runs and within which limits.
type containerSpec struct {
	role     string   // value of LabelRole
	cmd      []string // replaces the image's entrypoint and command
	limits   sandbox.Limits
	deadline time.Time // after it, the container is a leftover anyone may remove
	framed   bool      // cmd is the run supervisor (runproto.Command), whose output is framed
	nonce    string    // the supervisor's trailer nonce when framed: the first line of its stdin
	// secret: the supervisor is not dumpable (runproto.SupervisorProgram), so the
	// nonce is PID 1's secret and its trailers end the run.
	secret bool
	egress bool // the container reaches the network through the egress proxy
	// packages, when not nil, is bound at sandbox.PackagesPath (read-only
	// for a run, writable for the install phase) and named by the
	// environment of lang.
	packages *sandbox.PackageDir
	lang     string
	// env is more of the container's environment: a run's own
	// (sandbox.Request.Env, its token), which only a container created for
	// that run can have.
	env []string
	// stdout and stderr, when set, receive the container's output as it
	// comes, instead of a run's streams (a session's supervisor).
	stdout, stderr io.Writer
}

// session is a started, locked-down container whose stdin, stdout and
// stderr are attached, whose output is being read and whose exit is being
// waited for. Until a run gives it input it can wait in the pool.
type session struct {
	id       string
	lang     string // language of a run container; "" for the probe
	limits   sandbox.Limits
	deadline time.Time
	created  time.Time
	attach   client.HijackedResponse
	out      *runproto.Streams

	exitedC chan struct{} // closed once the engine answered the wait
	exit    waitResult    // valid once exitedC is closed
	stop    context.CancelFunc

	readC chan struct{} // closed once the output stream ended
	// secret: the run's supervisor keeps its nonce out of the program's
	// reach, and its trailers end the run (containerSpec.secret).
	secret bool

	egress *runEgress // the container's egress, when it has one

	brokenOnce sync.Once
	brokenC    chan struct{} // closed once exitedC or readC is
}

// Language, Limits, Deadline and Broken make a session a warm pool item.
func (s *session) Language() string        { return s.lang }
func (s *session) Limits() sandbox.Limits  { return s.limits }
func (s *session) Deadline() time.Time     { return s.deadline }
func (s *session) Broken() <-chan struct{} { return s.brokenC }
func (s *session) markBroken()             { s.brokenOnce.Do(func() { close(s.brokenC) }) }

// broken reports, without blocking, whether the container has stopped or
// its streams have ended (either way it can serve no run).
func (s *session) broken() bool {
	select {
	case <-s.brokenC:
		return true
	default:
		return false
	}
}

// containerEnv is the whole environment of a sandboxed program: nothing of
// the server's own environment is ever added.
var containerEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/tmp",
	"LANG=C.UTF-8",
	"TMPDIR=/tmp",
}

// containerEnv is containerEnv, and WORKSPACE when there is a workspace.
func (r *Runner) containerEnv() []string {
	if r.cfg.Workspace == nil {
		return containerEnv
	}
	return append(slices.Clone(containerEnv), sandbox.WorkspaceVariable+"="+sandbox.WorkspacePath)
}

// tmpfsOptions are the mount options of /tmp besides its size. noexec stops
// a program from writing a binary and running it directly; interpreters
// still run the program file, which is given to them as an argument.
// nr_inodes caps its files as process mode caps its tmpfs mounts: without it
// a run could make millions of empty files within the size cap.
const tmpfsOptions = "rw,nosuid,nodev,noexec,mode=1777,nr_inodes=16384"

// configs builds the configuration of a locked-down container. The host
// configuration, which holds every isolation setting, comes from hostConfig
// alone, so a warm container and a cold one are locked down identically.
// Only API 1.41 features are used.
func (r *Runner) configs(spec containerSpec) (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Image:        r.cfg.Image,
		User:         r.user,
		Hostname:     "sandbox",
		Entrypoint:   spec.cmd,
		Env:          r.containerEnv(),
		WorkingDir:   "/tmp",
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		// StdinOnce closes the container's stdin when the attach stream
		// that was open at start goes away. A warm container's bootstrap
		// then reads end-of-file and the container exits, so a crashed
		// server leaves only stopped containers behind.
		StdinOnce: true,
		Tty:       false,
		// See hostConfig: the runtime makes the network namespace.
		NetworkDisabled: r.ownNetns,
		Labels: map[string]string{
			LabelManaged:  "true",
			LabelInstance: r.instance,
			LabelDeadline: strconv.FormatInt(spec.deadline.Unix(), 10),
			LabelRole:     spec.role,
		},
	}
	if r.owner != "" {
		cfg.Labels[LabelOwner] = r.owner
	}
	host := r.hostConfig(spec.limits)
	if spec.egress {
		cfg.Env = append(slices.Clone(r.containerEnv()), egressEnv()...)
	}
	if pd := spec.packages; pd != nil {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      pd.HostDir,
			Target:      sandbox.PackagesPath,
			ReadOnly:    !pd.Writable,
			BindOptions: &mount.BindOptions{NonRecursive: true},
		})
		cfg.Env = append(slices.Clone(cfg.Env), sandbox.PackageEnv(spec.lang, sandbox.PackagesPath)...)
	}
	cfg.Env = sandbox.WithEnv(cfg.Env, spec.env)
	return cfg, host
}

// hostConfig is the locked-down host configuration of every container with
// the given limits.
func (r *Runner) hostConfig(lim sandbox.Limits) *container.HostConfig {
	tmpfs := tmpfsOptions
	if lim.FileSizeBytes > 0 {
		tmpfs += ",size=" + strconv.FormatInt(lim.FileSizeBytes, 10)
	}
	// The network. Every container has a network namespace of its own
	// whose only interface is loopback. With network mode none alone, the
	// engine's network stack (libnetwork) takes part in every start: on
	// Docker 20.10 it re-executes the 75 MB dockerd binary twice per
	// container (the libnetwork-setkey hook that runc runs, and set-ipv6
	// to turn IPv6 off in the namespace), some 85 ms of CPU, close to 40%
	// of the machine's work per run (docs/performance.md). With
	// NetworkDisabled the engine leaves the network namespace of the
	// container's specification without a path, so the runtime creates a
	// new empty one (runc brings its loopback up), and the sysctl disables
	// IPv6 in it, as the engine's stack does. Network mode none stays set
	// either way. What the engine's stack also gives is /etc/hosts; the
	// runtime's namespace leaves the image's empty placeholder there, so
	// the probe checks that the image resolves localhost without it (the
	// sandbox image has nss-myhostname), and ownNetns is off otherwise.
	host := &container.HostConfig{
		NetworkMode:    network.NetworkNone,
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": tmpfs},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		IpcMode:        container.IPCModePrivate,
		LogConfig:      container.LogConfig{Type: "none"}, // output goes to the attached stream only
		Runtime:        r.cfg.Runtime,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	if r.ownNetns {
		host.Sysctls = map[string]string{"net.ipv6.conf.all.disable_ipv6": "1"}
	}
	if w := r.cfg.Workspace; w != nil {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      w.Dir,
			Target:      sandbox.WorkspacePath,
			ReadOnly:    !w.Writable,
			BindOptions: &mount.BindOptions{NonRecursive: !w.Writable},
		})
	}
	if c := r.cfg.PackagesCache; c != "" {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      c,
			Target:      PackagesCachePath,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{NonRecursive: true},
		})
	}
	// /dev/shm is writable tmpfs too; keep it no larger than /tmp.
	host.ShmSize = 64 << 20
	if lim.FileSizeBytes > 0 && lim.FileSizeBytes < host.ShmSize {
		host.ShmSize = lim.FileSizeBytes
	}
	res := &host.Resources
	if lim.MemoryBytes > 0 {
		res.Memory = lim.MemoryBytes
		res.MemorySwap = lim.MemoryBytes // no swap on top of the memory limit
	}
	if lim.CPUs > 0 {
		res.NanoCPUs = int64(lim.CPUs * 1e9)
	}
	if lim.Processes > 0 {
		p := int64(lim.Processes)
		if r.engine.gvisor {
			// Under gVisor the container's pids cgroup holds gVisor's own
			// kernel (the Sentry, its gofer and, with the ptrace platform,
			// its stub processes), not the program's processes: the Sentry
			// alone has some 40 host threads at rest and several hundred
			// while a fork bomb churns, and when the cgroup refuses it a
			// thread it dies (exit 2), which is why runsc could not even
			// start a probe with the ordinary limit. So the program's limit
			// is RLIMIT_NPROC, which gVisor's kernel enforces per sandbox
			// (counting threads, as Linux does; under runc it would count
			// every process of the uid on the host instead), and the cgroup
			// only bounds the sandbox's host footprint.
			res.Ulimits = append(res.Ulimits, &container.Ulimit{Name: "nproc", Soft: p, Hard: p})
			p = gvisorPids(lim.Processes)
		}
		res.PidsLimit = &p
	}
	if lim.OpenFiles > 0 {
		n := int64(lim.OpenFiles)
		res.Ulimits = append(res.Ulimits, &container.Ulimit{Name: "nofile", Soft: n, Hard: n})
	}
	if lim.FileSizeBytes > 0 {
		res.Ulimits = append(res.Ulimits, &container.Ulimit{Name: "fsize", Soft: lim.FileSizeBytes, Hard: lim.FileSizeBytes})
	}
	return host
}

// gvisorPids is the host pids limit of a gVisor container whose program
// may have processes processes and threads (see hostConfig).
func gvisorPids(processes int) int64 {
	return 1024 + 16*int64(processes)
}

// runSpec is the specification of a run container of lang, warm or cold.
// Only its role and deadline labels differ between the two.
func (r *Runner) runSpec(lang string, lim sandbox.Limits, role string, deadline time.Time, pd *sandbox.PackageDir) containerSpec {
	nonce := runproto.NewNonce()
	sup := runproto.Supervisor{Python: r.relayPython}
	if r.cfg.Egress != nil {
		// The relay starts, and listens, before the program (egress needs
		// python3 in the image).
		sup.Relay = []string{egressMount + "/" + egressSocket, strconv.Itoa(egressPort), relayProgram}
	}
	cmd := runproto.Command(lang, r.interps[lang], sup)
	return containerSpec{
		role:     role,
		cmd:      cmd,
		limits:   containerLimits(lim),
		deadline: deadline,
		framed:   true,
		secret:   sup.Secret(),
		nonce:    nonce,
		egress:   r.cfg.Egress != nil,
		packages: pd,
		lang:     lang,
	}
}

// runDeadline is the deadline label of a cold run container.
func runDeadline(now time.Time, timeout time.Duration) time.Time {
	if timeout > 0 {
		return now.Add(timeout + leftoverGrace)
	}
	return now.Add(noTimeoutDeadline)
}

// containerLimits keeps the limits that are part of a container's
// configuration (the timeout and the output cap are enforced by the server).
func containerLimits(l sandbox.Limits) sandbox.Limits { return warmpool.ContainerLimits(l) }

// start creates a locked-down container, attaches to its streams, starts
// reading its output and waiting for its exit, and starts it. ctx bounds the
// setup only; the session lives until discard. On error nothing is left on
// the engine.
func (r *Runner) start(ctx context.Context, spec containerSpec, lang string) (*session, error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineTimeout)
	defer cancel()
	id, eg, err := r.create(opCtx, spec)
	if err != nil {
		return nil, err
	}
	fail := func(doing string, err error) (*session, error) {
		if eg != nil {
			eg.close()
		}
		if rerr := r.remove(id); rerr != nil {
			r.log.Warn("could not remove a container after a failed start", "id", shortID(id), "err", rerr)
		}
		return nil, engineErr(doing, err)
	}

	att, err := r.cli.ContainerAttach(opCtx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fail("attaching to the container", err)
	}
	s := &session{
		id: id, lang: lang, limits: spec.limits, deadline: spec.deadline, created: time.Now(), secret: spec.secret,
		attach:  att.HijackedResponse,
		out:     runproto.NewStreams(spec.framed, spec.nonce),
		exitedC: make(chan struct{}),
		readC:   make(chan struct{}),
		brokenC: make(chan struct{}),
		egress:  eg,
	}
	r.watchExit(s)
	r.readOutput(s, spec)

	if _, err := r.cli.ContainerStart(opCtx, id, client.ContainerStartOptions{}); err != nil {
		s.attach.Close()
		s.stop()
		return fail("starting the container", err)
	}
	if spec.framed {
		// The supervisor reads its nonce before it starts anything (see
		// runproto): it never appears in a command line.
		if _, err := io.WriteString(s.attach.Conn, spec.nonce+"\n"); err != nil {
			s.attach.Close()
			s.stop()
			return fail("handing the supervisor its nonce", err)
		}
	}
	return s, nil
}

// create creates the container of spec, with its egress when it has one,
// and tracks it. On error nothing is left on the engine.
func (r *Runner) create(ctx context.Context, spec containerSpec) (string, *runEgress, error) {
	cfg, host := r.configs(spec)
	var eg *runEgress
	if spec.egress {
		var err error
		if eg, err = r.openEgress(spec.role); err != nil {
			return "", nil, err
		}
		host.Mounts = append(host.Mounts, eg.mount())
	}
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host})
	if err != nil {
		if eg != nil {
			eg.close()
		}
		return "", nil, engineErr("creating the container", err)
	}
	for _, w := range created.Warnings {
		r.log.Warn("engine warning on container create", "warning", w)
	}
	if err := r.track(created.ID); err != nil {
		_ = r.remove(created.ID)
		if eg != nil {
			eg.close()
		}
		return "", nil, fmt.Errorf("docker: %w", err)
	}
	return created.ID, eg, nil
}

// watchExit waits for the container's next exit, from before it starts, so
// that a fast exit is not missed; it records the exit in s.exit and closes
// s.exitedC. The wait lives until the session is discarded (s.stop).
func (r *Runner) watchExit(s *session) {
	waitCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	wr := r.cli.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	go func() {
		select {
		case w := <-wr.Result:
			code, err := exitStatus(w)
			s.exit = waitResult{code: code, err: err}
		case err := <-wr.Error:
			s.exit = waitResult{code: -1, err: err}
		}
		close(s.exitedC)
		s.markBroken()
	}()
}

// readOutput reads the container's output into its streams (or into
// spec's own writers) until the stream ends, and then closes s.readC.
func (r *Runner) readOutput(s *session, spec containerSpec) {
	go func() {
		stdout, stderr := s.out.Stdout(), s.out.Stderr()
		if spec.stdout != nil {
			stdout, stderr = spec.stdout, spec.stderr
		}
		_, err := stdcopy.StdCopy(stdout, stderr, s.attach.Reader)
		if err != nil {
			r.log.Debug("reading container output", "id", shortID(s.id), "err", err)
		}
		if c, ok := spec.stdout.(io.Closer); ok {
			_ = c.Close()
		}
		s.out.End()
		close(s.readC)
		s.markBroken()
	}()
}

// kill sends SIGKILL to the container with a context of its own. A
// container that has already stopped is not an error.
func (r *Runner) kill(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := r.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		r.log.Debug("kill", "id", shortID(id), "err", err)
	}
}

// inspectState reads the container's final state with a context of its own.
func (r *Runner) inspectState(id string) (*container.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	res, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	return res.Container.State, nil
}

// discard releases a session: it closes the streams, stops waiting, and
// kills and removes the container. It blocks until the engine has removed
// it; see release for the asynchronous form.
func (r *Runner) discard(s *session) {
	s.attach.Close()
	s.stop()
	if s.egress != nil {
		s.egress.close()
	}
	if err := r.remove(s.id); err != nil {
		r.log.Warn("could not remove a container; the reaper will retry", "id", shortID(s.id), "err", err)
	}
}

// release discards a session in the background. Close waits for every
// release to finish, so no container outlives the Runner.
func (r *Runner) release(s *session) {
	r.removals.Add(1)
	go func() {
		defer r.removals.Done()
		r.discard(s)
	}()
}
