// Package executor is the run core that process mode (sandbox/process) and
// mode none (sandbox/host) share, as Nomad's exec and raw_exec drivers share
// an executor: it starts a program under a supervisor (or, in direct mode,
// by itself), enforces the timeout and the output cap, answers cancellation,
// and kills every process of the run when it ends. It also holds what both
// modes need around a run: the work root, run directories and the group of
// runs in flight.
//
// What a run gets (environment, user, rlimits, kernel isolation) is the
// caller's choice, written in a Spec; this package applies it and decides
// nothing.
package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/codeexec/codeexec/sandbox"
)

// Spec is one program to start under the supervisor: what Spawn needs from a
// runner. Both process mode and mode none (sandbox/host) use it; they differ
// only in the environment, the limits, the user and the isolation.
type Spec struct {
	// Path is the interpreter's absolute path; Args follow it (the program
	// file included).
	Path string
	Args []string
	// Env is the complete environment of the program.
	Env []string
	// Dir is the working directory.
	Dir string
	// Stdin is the program's standard input ("" means end of file at once).
	// It reaches the program through a pipe, never through the spec.
	Stdin string `json:"-"`
	// Limits bound the run. Timeout and OutputBytes are always enforced;
	// the others only when Rlimits is set.
	Limits sandbox.Limits
	// Observe, if set, sees the output as it is kept (sandbox.Request.Observe).
	Observe sandbox.ObserveFunc `json:"-"`
	// Rlimits turns on the kernel resource limits derived from Limits.
	Rlimits bool
	// AddressSpaceExtra is added to the address-space limit (interpreters
	// such as V8 reserve address space they never touch).
	AddressSpaceExtra int64
	// NoAddressSpaceLimit leaves RLIMIT_AS unset: when a cgroup bounds the
	// run's memory, and for node, whose heap --max-old-space-size bounds
	// instead (see interpreterArgs), so that no child of node inherits an
	// address-space allowance meant for V8's reservations.
	NoAddressSpaceLimit bool
	// CgroupProcs are the cgroup.procs files of the run's cgroups, opened
	// by the server: the supervisor moves the exec stage into them before
	// the exec stage applies anything, so that the program and all it
	// starts are counted, and the supervisor is not.
	CgroupProcs []*os.File `json:"-"`
	// CgroupFDs is how many cgroup.procs descriptors the supervisor
	// receives (after the fixed ones).
	CgroupFDs int
	// Credential, when set, is the user the program runs as.
	Credential *Credential
	// NoNewPrivs stops the program from gaining privileges through exec
	// (setuid binaries, file capabilities).
	NoNewPrivs bool
	// Isolation is the kernel isolation of the run (Linux only).
	Isolation Isolation
	// Seatbelt, when set, is the Seatbelt profile (SBPL) that the program
	// runs under (macOS only): the exec stage, once it set the rlimits,
	// execs the program through sandbox-exec with it.
	Seatbelt string
	// Collect, with a mount namespace, has the supervisor collect the
	// artifacts of the run's private run directory into the Result (see
	// CollectSpec). Without one, the caller collects from Dir itself.
	Collect *CollectSpec
	// Direct starts the program without a supervisor (mode none, where
	// nothing is applied to it): the run's process group is killed at the
	// end, and on Linux the orphans that carry RunMarker in their
	// environment are swept from the server, which must have called
	// EnableOrphanReaping.
	Direct bool
	// RunMarker is a KEY=value pair in Env that identifies the run's
	// processes for the orphan sweep of direct mode.
	RunMarker string `json:"-"`
	// EgressAddr, when set, is a TCP address (host:port) on which the
	// supervisor listens inside the run's network namespace, before the
	// program starts; it hands the listening socket to the server, which
	// calls EgressServe with it. That socket is the run's only way out of
	// its namespace. It needs Isolation.Network.
	EgressAddr string
	// EgressServe takes over the listener (see EgressAddr). It is called
	// once, before the program starts.
	EgressServe func(net.Listener) `json:"-"`
	// EgressFD is the supervisor's descriptor of the egress socket pair,
	// set by the server: the first after the other descriptors it passes.
	EgressFD int
	// Reaped, when not nil, lets Spawn return as soon as the supervisor
	// has reported and ended the run's output (every process of the run is
	// gone), before the supervisor's own exit; it is closed once the
	// supervisor has been waited for, which must come before what the run
	// held (its user, its cgroups, its directories) is given back.
	Reaped chan struct{} `json:"-"`
	// Preload, in the Spec given to Prepare, starts the interpreter ahead
	// of its run (see Preload); the run's Spec then carries the message
	// that starts the program.
	Preload *Preload
}

// Preload is a run whose interpreter starts ahead of it: Prepare's Spec
// is then complete but for the request (Path, Args, Env, Limits, ...), and
// the supervisor enters the run's isolation and has the exec stage start
// the interpreter at once, in the run's final sandbox (namespaces, cgroups,
// user, Landlock, seccomp filter, rlimits, minimal root, environment). The
// interpreter's descriptor 3 is a socket to the supervisor: its bootstrap
// (the caller's, in Args) loads what it needs, writes PreloadReady there
// and reads until the end of the socket. At the hand-over the supervisor
// copies the run's directory (the program file and the request's files,
// written there by the server as for any run) into the run's own, records
// it for the artifacts, writes Message and closes its end; the bootstrap
// takes the request's environment from Message, closes the descriptor and
// runs the program. An end of the socket without a message (the run was
// discarded, or the supervisor is gone) must make the bootstrap exit
// without running anything. The run's Spec must have the same Path, Args,
// Env, Dir, Isolation and Limits (but the output cap, which only the server
// enforces) as Prepare's: the program runs under Prepare's.
type Preload struct {
	// Message is what the program's start is told, in the bootstrap's own
	// format; empty in Prepare's Spec.
	Message []byte
}

// PreloadReady is the byte that the bootstrap of an interpreter started
// ahead (see Preload) writes on its fd 3 once it has loaded, before it
// reads its message there.
const PreloadReady = 0x16

// needsExecStage reports whether anything must be applied to the program's
// own process before the interpreter starts.
func (s Spec) needsExecStage() bool {
	return s.Rlimits || s.Credential != nil || s.NoNewPrivs || s.Isolation.Namespaces() || s.Isolation.Landlock || s.Isolation.Seccomp || s.CgroupFDs > 0
}

// Credential is a numeric user and group.
type Credential struct {
	UID, GID uint32
}

// supervised is a started supervisor (or, in direct mode, the program).
type supervised struct {
	cmd *exec.Cmd
	// stop asks for the run to be killed.
	stop func()
	// status returns how the program ended; call it after cmd.Wait
	// returned, or finished was closed.
	status func() status
	// finished, unless nil, is closed once the supervisor has reported and
	// ended the run's output: every process of the run is gone, and only
	// the supervisor's own exit is left.
	finished <-chan struct{}
	// reaped, unless nil, is called once cmd.Wait has returned.
	reaped func()
}

// received is the byte the supervisor writes on its status pipe once it
// has read its run, before the JSON status.
const received = '+'

// loaded is the byte a supervisor writes on its status pipe first, once the
// interpreter it started ahead (Spec.Preload) has loaded.
const loaded = '*'

// readStatus decodes the supervisor's report from r.
func readStatus(r io.Reader) status {
	var st status
	b, _ := io.ReadAll(r)
	b, begun := bytes.CutPrefix(b, []byte{received})
	st.notBegun = !begun
	if len(bytes.TrimSpace(b)) == 0 {
		st.Error = "the supervisor ended without a status"
	} else if err := json.Unmarshal(b, &st); err != nil {
		st.Error = "unreadable status from supervisor: " + err.Error()
	}
	return st
}

// status is what the supervisor reports back over its status pipe.
type status struct {
	Started  bool   `json:"started"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	// notBegun: the supervisor never said it read its run.
	notBegun bool
	// Artifacts are what Spec.Collect asked for.
	Artifacts *wireCollection `json:"artifacts,omitempty"`
}

// stopGrace is how long the supervisor gets to kill the run's processes and
// report before it is itself killed.
const stopGrace = 5 * time.Second

// Spawn runs spec under the supervisor and waits for it: the program and
// every process it starts are killed when it ends, when the timeout passes,
// when the output cap is reached or when ctx is cancelled. It returns the
// outcome with the output filled into res. An error means the program could
// not be run (or ctx was cancelled, in which case it wraps ctx.Err()).
func Spawn(ctx context.Context, spec Spec, res *sandbox.Result) error {
	return spawn(ctx, spec, res, func(out *sandbox.Output) (*supervised, error) { return startRun(spec, out) })
}

func spawn(ctx context.Context, spec Spec, res *sandbox.Result, startSup func(*sandbox.Output) (*supervised, error)) error {
	stopCh := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopCh) }) }
	out := sandbox.NewOutput(spec.Limits.OutputBytes, stop).Observe(spec.Observe)

	sup, err := startSup(out)
	if err != nil {
		if spec.Reaped != nil {
			close(spec.Reaped) // no supervisor is left to wait for
		}
		return fmt.Errorf("%w: starting the supervisor: %w", sandbox.ErrSandboxUnavailable, err)
	}
	cmd := sup.cmd
	start := time.Now()
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()

	var timer <-chan time.Time
	if spec.Limits.Timeout > 0 {
		t := time.NewTimer(spec.Limits.Timeout)
		defer t.Stop()
		timer = t.C
	}

	var waitErr error
	timedOut, cancelled, killed, waited := false, false, false, false
	select {
	case waitErr = <-waitCh:
		waited = true
	case <-sup.finished:
	case <-timer:
		timedOut, killed = true, true
	case <-stopCh:
		killed = true
	case <-ctx.Done():
		cancelled, killed = true, true
	}
	if killed {
		waitErr, waited = stopAndWait(sup, waitCh), true
	}
	if !waited && spec.Reaped == nil {
		waitErr, waited = <-waitCh, true
	}
	reaped := func() {
		if sup.reaped != nil {
			sup.reaped()
		}
		if spec.Reaped != nil {
			close(spec.Reaped)
		}
	}
	if waited {
		reaped()
	} else {
		go func() {
			<-waitCh
			reaped()
		}()
	}
	st := sup.status()
	res.Duration = time.Since(start)
	out.Fill(res)
	res.TimedOut = timedOut
	if timedOut && !st.Started {
		// The time limit ran out before the program began (its interpreter,
		// started ahead, was still loading): a timeout like any other, not
		// a failure of the sandbox.
		st.Error = ""
	}

	switch {
	case cancelled:
		return fmt.Errorf("run cancelled: %w", ctx.Err())
	case st.Error != "" && !st.Started && st.notBegun && !killed:
		return fmt.Errorf("%w: %w: %s", sandbox.ErrSandboxUnavailable, ErrNotBegun, st.Error)
	case st.Error != "" && !st.Started:
		return fmt.Errorf("%w: %s", sandbox.ErrSandboxUnavailable, st.Error)
	case st.Error != "" && !killed:
		return fmt.Errorf("%w: %s (supervisor: %v)", sandbox.ErrSandboxUnavailable, st.Error, waitErr)
	}
	res.ExitCode, res.Signal = st.ExitCode, st.Signal
	if st.Artifacts != nil {
		res.Artifacts = st.Artifacts.collection()
	}
	if killed && res.ExitCode == 0 {
		// The program was stopped before the supervisor could see it end.
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "killed"
	}
	return nil
}

// stopAndWait asks for the run to be killed and waits for it; a supervisor
// that does not finish within stopGrace is killed with its group.
func stopAndWait(sup *supervised, waitCh <-chan error) error {
	sup.stop()
	select {
	case err := <-waitCh:
		return err
	case <-time.After(stopGrace):
		killGroup(sup.cmd.Process.Pid)
		return <-waitCh
	}
}

// commandOf is the command path args of spec's run: its environment,
// working directory and standard input, its output into out, and
// stopGrace for its output to close after it ended.
func commandOf(spec Spec, out *sandbox.Output, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	if spec.Stdin != "" {
		cmd.Stdin = strings.NewReader(spec.Stdin)
	}
	cmd.Stdout = out.Stdout()
	cmd.Stderr = out.Stderr()
	cmd.WaitDelay = stopGrace
	return cmd
}

// exitStatus reads how a waited-for command ended.
func exitStatus(cmd *exec.Cmd) status {
	ps := cmd.ProcessState
	if ps == nil {
		return status{Error: "the program did not run"}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return status{Started: true, ExitCode: ps.ExitCode()}
	case ws.Signaled():
		return status{Started: true, ExitCode: 128 + int(ws.Signal()), Signal: signalName(ws.Signal())}
	}
	return status{Started: true, ExitCode: ws.ExitStatus()}
}

// children are the pids of the processes Spawn started and still waits
// for. The orphan sweep of mode none never reaps them: their exec.Cmd does.
var children = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// startTracked starts cmd and records its pid, atomically with respect to
// the orphan sweep.
func startTracked(cmd *exec.Cmd) error {
	children.Lock()
	defer children.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	children.pids[cmd.Process.Pid] = true
	return nil
}

func untrack(pid int) {
	children.Lock()
	delete(children.pids, pid)
	children.Unlock()
}

// ErrNotBegun says that the supervisor was gone before it read its run
// (a prepared one killed while it waited): nothing of the run happened, and
// it may start afresh.
var ErrNotBegun = errors.New("the supervisor was gone before the run began")

// SpawnPrepared runs spec, like Spawn, on a supervisor started ahead by
// Prepare with the same Isolation, Dir and cgroups.
func SpawnPrepared(ctx context.Context, p *Prepared, spec Spec, res *sandbox.Result) error {
	return spawn(ctx, spec, res, func(out *sandbox.Output) (*supervised, error) { return p.handOver(spec, out) })
}

// lateWriter passes writes on to a writer set later, and drops them until
// then: a prepared supervisor's output before its run.
type lateWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lateWriter) set(w io.Writer) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

func (l *lateWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	w := l.w
	l.mu.Unlock()
	if w == nil {
		return len(p), nil
	}
	return w.Write(p)
}

// lateReader is a run's standard input, known only at the hand-over: reads
// wait for it.
type lateReader struct {
	once  sync.Once
	ready chan struct{}
	r     *strings.Reader
}

func newLateReader() *lateReader { return &lateReader{ready: make(chan struct{})} }

// set gives the input; only the first call counts.
func (l *lateReader) set(s string) {
	l.once.Do(func() {
		l.r = strings.NewReader(s)
		close(l.ready)
	})
}

func (l *lateReader) Read(p []byte) (int, error) {
	<-l.ready
	return l.r.Read(p)
}
