//go:build linux

package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// The supervisor is the codeexec binary itself, re-executed with one of these
// first arguments, its internal subcommands (see Helpers):
//
//	supervisorArg: stays for the whole run as a child subreaper: every
//	  process the program starts, even a daemon that double-forks or calls
//	  setsid, is re-parented to it, and it kills them all when the run ends.
//	execArg: applies the rlimits, no-new-privileges and the user to itself,
//	  then replaces itself with the interpreter.
const (
	supervisorArg = "__codeexec-sandbox-supervisor"
	execArg       = "__codeexec-sandbox-exec"
)

// ctlFD is the supervisor's end of the control pipe (see startRun).
const ctlFD = 5

// exeFD is the descriptor on which the supervisor and the exec stage find
// the codeexec binary when the run is isolated: they re-execute it as
// /proc/self/fd/6, which works whoever they run as and whatever root they see.
const exeFD = 6

// RunCoreIDArg is the internal subcommand that prints the binary's
// sandbox.RunCoreID: codeexec asks its run helper for it (see
// process.FindHelper).
const RunCoreIDArg = "__codeexec-sandbox-run-core-id"

// Helpers are the internal subcommands that the run core re-executes the
// binary as, by their first argument: the supervisor and the exec stage;
// and the one that says which run core the binary has. Each returns the
// exit status. The binary must run the one its first argument names, and
// nothing else (see MaybeRunHelper).
var Helpers = map[string]func() int{supervisorArg: supervisorMain, execArg: execMain, RunCoreIDArg: runCoreIDMain}

// runCoreIDMain prints sandbox.RunCoreID.
func runCoreIDMain() int {
	_, err := os.Stdout.WriteString(sandbox.RunCoreID() + "\n")
	if err != nil {
		return 1
	}
	return 0
}

// startRun starts the supervisor (or, for a direct Spec, the program
// itself) with the program's stdio attached and hands it the Spec.
func startRun(spec Spec, out *sandbox.Output) (*supervised, error) {
	if spec.Direct {
		return startDirect(spec, out, func(pid int) { sweepOrphans(spec.RunMarker) })
	}
	p, err := prepare(spec)
	if err != nil {
		return nil, err
	}
	return p.handOver(spec, out)
}

// Prepared is a supervisor started ahead of its run, in the run's
// namespaces, with the exec stage started and in the run's cgroups: what is
// left for the run is its own work (the minimal root, the program). A
// Prepared serves one run (SpawnPrepared) or is discarded (Close).
type Prepared struct {
	cmd                 *exec.Cmd
	cfgW, statusR, ctlW *os.File
	egressConn          *net.UnixConn
	stdout, stderr      *lateWriter
	stdin               *lateReader
	egressFD            int
	closeOnce, handOnce sync.Once
	base                Spec
	// status reads the supervisor's status pipe; with Preload its first
	// byte, read ahead, closes loaded, or failed.
	status         io.Reader
	loaded, failed chan struct{}
	// output is the run's stdout and stderr as the supervisor passes them
	// on, copied into stdout and stderr.
	output *outputPipes
}

// Prepare starts a supervisor for a run whose Spec is not known yet. base
// holds what must not change between it and the run's Spec: Isolation, Dir,
// CgroupProcs, Rlimits, Credential, NoNewPrivs and EgressAddr (the rest is
// ignored until the run's Spec comes). With base.Preload, base is the whole
// run but for the request, and the interpreter starts at once (see
// Preload).
func Prepare(base Spec) (*Prepared, error) {
	if base.Direct {
		return nil, errors.New("a direct run has no supervisor to prepare")
	}
	if base.Preload != nil && (!base.needsExecStage() || len(base.Preload.Message) > 0) {
		return nil, errors.New("an interpreter started ahead needs an exec stage, and its message comes with its run")
	}
	return prepare(base)
}

// Loaded is closed once the interpreter that the Prepared started ahead
// (Spec.Preload) has loaded and waits for its run; nil without Preload.
func (p *Prepared) Loaded() <-chan struct{} { return p.loaded }

// Failed is closed once the supervisor that was to start an interpreter
// ahead (Spec.Preload) reported instead that it could not, or is gone; nil
// without Preload. At most one of Loaded and Failed is closed.
func (p *Prepared) Failed() <-chan struct{} { return p.failed }

// Preloaded reports whether the Prepared starts its interpreter ahead.
func (p *Prepared) Preloaded() bool { return p.base.Preload != nil }

// The supervisor's name (its comm, as ps shows it) says whether it waits
// for its run or runs one, so that tools, and the tests that check that
// nothing of a run outlives it, can tell a supervisor prepared ahead of
// demand from a run's.
const (
	nameWaiting = "codeexec-ready"
	nameRunning = "codeexec-run"
)

func prepare(base Spec) (*Prepared, error) {
	exe, err := runCoreBinary()
	if err != nil {
		return nil, fmt.Errorf("finding the codeexec binary: %w", err)
	}
	var opened []*os.File
	fail := func(err error) (*Prepared, error) {
		for _, f := range opened {
			f.Close()
		}
		return nil, err
	}
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			opened = append(opened, r, w)
		}
		return r, w, err
	}
	cfgR, cfgW, err := pipe()
	if err != nil {
		return fail(err)
	}
	statusR, statusW, err := pipe()
	if err != nil {
		return fail(err)
	}
	// The control pipe: closing its write end (or the server dying) tells
	// the supervisor to stop the run. Signals are not used for that, because
	// the program can send them to its PID namespace's init.
	ctlR, ctlW, err := pipe()
	if err != nil {
		return fail(err)
	}
	p := &Prepared{cfgW: cfgW, statusR: statusR, ctlW: ctlW, base: base,
		stdout: &lateWriter{}, stderr: &lateWriter{}, stdin: newLateReader()}
	if p.output, err = newOutputPipes(p.stdout, p.stderr); err != nil {
		return fail(err)
	}
	opened = append(opened, p.output.outR, p.output.outW, p.output.errR, p.output.errW)
	var egressFile *os.File
	if base.EgressAddr != "" {
		if !base.Isolation.Network {
			return fail(errors.New("egress needs the run's own network namespace"))
		}
		if p.egressConn, egressFile, err = egressPair(); err != nil {
			return fail(err)
		}
		defer egressFile.Close()
	}
	cmd := exec.Command(exe, supervisorArg)
	var exeFile *os.File
	if base.Isolation.Namespaces() {
		// In its namespaces the supervisor may run as a user who cannot
		// reach the binary's path; it re-executes the open file instead.
		if exeFile, err = os.Open(exe); err != nil {
			if p.egressConn != nil {
				p.egressConn.Close()
			}
			return fail(fmt.Errorf("opening the codeexec binary: %w", err))
		}
		defer exeFile.Close()
		cmd.Path = "/proc/self/fd/" + strconv.Itoa(exeFD)
	}
	// GORACE matters only to race-detector builds (tests), whose runtime
	// otherwise sleeps a second at exit.
	cmd.Env = []string{"PATH=" + MinimalPath, "GORACE=atexit_sleep_ms=0"}
	cmd.Dir = base.Dir
	// The run's stdio is known only at the hand-over: until then nothing
	// comes in, and what the supervisor might write is dropped.
	cmd.Stdin = p.stdin
	cmd.Stdout, cmd.Stderr = p.output.outW, p.output.errW
	cmd.ExtraFiles = []*os.File{cfgR, statusW, ctlR} // fds 3, 4, 5 = ctlFD
	if exeFile != nil || len(base.CgroupProcs) > 0 {
		cmd.ExtraFiles = append(cmd.ExtraFiles, exeFile) // fd 6 = exeFD (nil: closed)
	}
	// fds 7... = cgroupFD...: the run's cgroup.procs files.
	cmd.ExtraFiles = append(cmd.ExtraFiles, base.CgroupProcs...)
	base.CgroupFDs = len(base.CgroupProcs)
	if egressFile != nil {
		// After every other descriptor the supervisor gets.
		base.EgressFD = 3 + len(cmd.ExtraFiles)
		cmd.ExtraFiles = append(cmd.ExtraFiles, egressFile)
	}
	p.egressFD = base.EgressFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	applyCloneAttrs(cmd.SysProcAttr, base.Isolation)
	// A stdin held open by a stray process must not hold up Wait forever.
	cmd.WaitDelay = stopGrace
	err = startTracked(cmd)
	cfgR.Close()
	statusW.Close()
	ctlR.Close()
	p.output.started()
	if err != nil {
		cfgW.Close()
		statusR.Close()
		ctlW.Close()
		p.output.close()
		if p.egressConn != nil {
			p.egressConn.Close()
		}
		return nil, err
	}
	p.cmd = cmd
	p.status = statusR
	if base.Preload != nil {
		// Until its run, at the lowest CPU priority (see lowPriority).
		lowerPriority(cmd.Process.Pid)
		p.loaded, p.failed = make(chan struct{}), make(chan struct{})
		p.status = readLoaded(statusR, p.loaded, p.failed)
	}
	// The first half of the Spec (see supervisorMain): small, it fits the
	// pipe's buffer.
	if err := json.NewEncoder(cfgW).Encode(base); err != nil {
		p.Close()
		return nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	return p, nil
}

// Close discards a Prepared that will not serve a run: its supervisor
// stops and is waited for. It is safe to call more than once, and after
// SpawnPrepared (it does nothing then).
func (p *Prepared) Close() {
	handed := true
	p.handOnce.Do(func() { handed = false })
	if handed {
		return
	}
	p.closeOnce.Do(func() {
		p.ctlW.Close()
		p.cfgW.Close()
		p.stdin.set("")
		if p.egressConn != nil {
			p.egressConn.Close()
		}
		p.finish()
	})
}

// finish waits for a supervisor told to stop: its status is read to the
// end and dropped, it is waited for, and its output drained.
func (p *Prepared) finish() {
	_, _ = io.Copy(io.Discard, p.status)
	p.statusR.Close()
	_ = p.cmd.Wait()
	p.output.drain()
	untrack(p.cmd.Process.Pid)
}

// readLoaded reads the first byte of the status pipe r in the background:
// the loaded byte closes loadedC, anything else (a status, the end)
// failedC; the Reader it returns reads the rest of r, and any other first
// byte, once that read is done.
func readLoaded(r io.Reader, loadedC, failedC chan struct{}) io.Reader {
	first := make(chan []byte, 1)
	go func() {
		b := make([]byte, 1)
		n, _ := r.Read(b)
		if n == 1 && b[0] == loaded {
			close(loadedC)
			n = 0
		} else {
			close(failedC)
		}
		first <- b[:n]
	}()
	return &afterFirst{first: first, rest: r}
}

// afterFirst reads what readLoaded left of the first byte, then the rest.
type afterFirst struct {
	first <-chan []byte
	r     io.Reader
	rest  io.Reader
}

func (a *afterFirst) Read(p []byte) (int, error) {
	if a.r == nil {
		a.r = io.MultiReader(bytes.NewReader(<-a.first), a.rest)
	}
	return a.r.Read(p)
}

// PID is the prepared supervisor's process id.
func (p *Prepared) PID() int { return p.cmd.Process.Pid }

// Alive reports whether the prepared supervisor is still waiting for its
// run (it may have been killed since it was started).
func (p *Prepared) Alive() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == 0
}

// handOver gives the Prepared its run: the program's stdio and the Spec.
func (p *Prepared) handOver(spec Spec, out *sandbox.Output) (*supervised, error) {
	if (spec.Preload != nil) != p.Preloaded() {
		return nil, errors.New("the run's Spec and the prepared supervisor's disagree about starting the interpreter ahead")
	}
	taken := false
	p.handOnce.Do(func() { taken = true })
	if !taken {
		return nil, errors.New("this prepared supervisor was already used or closed")
	}
	cmd := p.cmd
	pid := cmd.Process.Pid
	p.stdout.set(out.Stdout())
	p.stderr.set(out.Stderr())
	p.stdin.set(spec.Stdin)
	spec.CgroupFDs = p.base.CgroupFDs
	spec.EgressFD = p.egressFD
	var stopOnce sync.Once
	stopped := make(chan struct{})
	stop := func() {
		stopOnce.Do(func() {
			close(stopped)
			p.ctlW.Close()
		})
	}
	// The run gets the server's CPU priority back before its program
	// gets the request (see restorePriority).
	if p.loading() {
		restoreEarly(pid)
		go p.beginWhenLoaded(spec, stopped, stop)
	} else {
		restorePriority(pid)
		// The second half of the Spec: the whole run. A supervisor that
		// died while it waited has closed its end: the run has not begun.
		if err := p.begin(spec, stop); err != nil {
			stop()
			p.finish()
			return nil, fmt.Errorf("%w: %v", ErrNotBegun, err)
		}
	}
	// The status is read as it comes: with a run's artifacts it can be
	// larger than the pipe's buffer, and a supervisor blocked writing it
	// would never exit. The supervisor ends the run's output before it
	// reports: with both, the run is over but for the supervisor's own exit
	// (finished).
	var st status
	read := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		st = readStatus(p.status)
		p.statusR.Close()
		close(read)
		<-p.output.done
		close(finished)
	}()
	return &supervised{
		cmd:      cmd,
		stop:     stop,
		finished: finished,
		status: func() status {
			stop()
			<-read
			p.output.drain()
			return st
		},
		reaped: func() { untrack(pid) },
	}, nil
}

// loading reports whether the Prepared's interpreter, started ahead at the
// lowest CPU priority, has not loaded yet.
func (p *Prepared) loading() bool {
	if on, _ := lowPriority(); !on || !p.Preloaded() {
		return false
	}
	select {
	case <-p.loaded:
		return false
	case <-p.failed:
		return false
	default:
		return true
	}
}

// beginWhenLoaded begins the run of a Prepared handed over while its
// interpreter, started ahead at the lowest CPU priority, was loading: the
// interpreter and its supervisor were still creating threads, and a thread
// being created as restorePriority walked by keeps the low value (under
// load, for seconds: a program at nice 19 on a busy host crawls). Until the
// interpreter has loaded the walk is repeated every rewalkEvery, so that
// the loading goes on at the server's priority; once it has loaded it
// creates no thread and its supervisor waits for the Spec, and a last walk
// leaves none at the low value. Only then does the supervisor get the Spec
// (it would wait for the loading before it used it anyway). If the run is
// stopped first, or the interpreter fails to load, the supervisor reports
// why on its status pipe.
func (p *Prepared) beginWhenLoaded(spec Spec, stopped <-chan struct{}, stop func()) {
	pid := p.cmd.Process.Pid
	tick := time.NewTicker(rewalkEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			restoreEarly(pid)
			continue
		case <-p.loaded:
			restorePriority(pid)
			if p.begin(spec, stop) != nil {
				stop()
			}
		case <-p.failed:
			p.abandon()
		case <-stopped:
			p.abandon()
		}
		return
	}
}

// rewalkEvery is how often beginWhenLoaded walks the run's threads while
// its interpreter loads.
const rewalkEvery = 10 * time.Millisecond

// begin sends the supervisor the second half of the Spec, the whole run,
// and serves the run's egress listener once the supervisor sends it. The
// error is the Spec's: the supervisor is gone.
func (p *Prepared) begin(spec Spec, stop func()) error {
	err := json.NewEncoder(p.cfgW).Encode(spec)
	p.cfgW.Close()
	if err != nil || p.egressConn == nil {
		if p.egressConn != nil {
			p.egressConn.Close()
		}
		return err
	}
	// The supervisor sends the listener before it starts the program; if
	// it fails first, its end closes and this returns.
	l, lerr := receiveEgressListener(p.egressConn)
	p.egressConn.Close()
	if lerr == nil && spec.EgressServe != nil {
		spec.EgressServe(l)
	} else {
		if lerr == nil {
			l.Close()
		}
		// The supervisor reports why on its status pipe.
		stop()
	}
	return nil
}

// abandon closes what the run would have been begun through, for a run
// that ended before it began (its supervisor reports why).
func (p *Prepared) abandon() {
	p.cfgW.Close()
	if p.egressConn != nil {
		p.egressConn.Close()
	}
}

// outputPipes carry the run's stdout and stderr from the supervisor to
// their writers; done is closed once both have ended (every process that
// held them is gone, or drain gave up on them).
type outputPipes struct {
	outR, outW, errR, errW *os.File
	done                   chan struct{}
}

// newOutputPipes makes the pipes and starts copying them into stdout and
// stderr.
func newOutputPipes(stdout, stderr io.Writer) (*outputPipes, error) {
	o := &outputPipes{done: make(chan struct{})}
	var err error
	if o.outR, o.outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if o.errR, o.errW, err = os.Pipe(); err != nil {
		o.outR.Close()
		o.outW.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(stdout, o.outR) })
	wg.Go(func() { _, _ = io.Copy(stderr, o.errR) })
	go func() {
		wg.Wait()
		close(o.done)
	}()
	return o, nil
}

// started closes the write ends, which the supervisor now holds.
func (o *outputPipes) started() {
	o.outW.Close()
	o.errW.Close()
}

// close ends both pipes, whoever holds them.
func (o *outputPipes) close() {
	o.outR.Close()
	o.errR.Close()
	o.started()
}

// drain waits until the output has ended, and, once the supervisor is
// gone, at most stopGrace for a stray process that holds the pipes open
// (then it closes them). Safe to call more than once.
func (o *outputPipes) drain() {
	select {
	case <-o.done:
	case <-time.After(stopGrace):
		o.close()
		<-o.done
	}
}

// setName sets the calling thread's name (the process's, on the main
// thread).
func setName(name string) {
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
}

func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// supervisorMain runs in the re-executed binary. It reads the Spec on fd 3,
// starts the exec stage in a process group of its own, waits for it (or for
// the end of the control pipe), kills every descendant, and writes the status on
// fd 4.
func supervisorMain() int {
	// Package initialisation, and so this function, runs on the main
	// thread, whose name is the process's.
	setName(nameWaiting)
	sv := &runSupervisor{
		cfg:    os.NewFile(3, "spec"),
		status: os.NewFile(4, "status"),
	}
	ctl := os.NewFile(ctlFD, "control")
	// Nothing this process holds reaches the program, whatever the server
	// passed on by mistake or inherited.
	_ = CloseInheritedOnExec()
	sv.stopReq = watchStop(ctl)
	// In a PID namespace the program may signal its init, the supervisor,
	// and without one its parent: every signal it can send is ignored (the
	// exec stage sets them back to their defaults for the program), so the
	// run ends and reports as usual.
	ignoreAllSignals()
	st := sv.supervise()
	// Every process of the run is gone: its output ends before the
	// report, so that the server has both once it has the report, and
	// need not wait for this process's own exit.
	endOutput()
	_ = json.NewEncoder(sv.status).Encode(st)
	_ = sv.status.Close()
	return 0
}

// endOutput points stdout and stderr at /dev/null (or closes them).
func endOutput() {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	for _, fd := range []int{1, 2} {
		if err == nil {
			_ = unix.Dup2(int(null.Fd()), fd)
		} else {
			_ = unix.Close(fd)
		}
	}
	if err == nil {
		null.Close()
	}
}

// runSupervisor is the run supervisor's side of its pipes with the server.
type runSupervisor struct {
	cfg    *os.File // fd 3: the Spec, twice (see supervise)
	status *os.File // fd 4: the begin byte, then the status
	// stopReq is closed when the server asks the run to stop.
	stopReq <-chan struct{}
}

// watchStop returns a channel closed at the end of the control pipe ctl: a
// stop request, when the server closed it, or died. It is watched first,
// so that a request during set-up is not lost.
func watchStop(ctl *os.File) <-chan struct{} {
	stopReq := make(chan struct{})
	go func() {
		var b [1]byte
		_, _ = ctl.Read(b[:])
		close(stopReq)
	}()
	return stopReq
}

// supervise supervises one run and returns its status.
//
// The Spec comes twice on fd 3: first the part that decides how the exec
// stage starts (the isolation, the cgroups, what must be applied to the
// program), then the whole run. The exec stage is started, and moved into
// the run's cgroups, before the rest of the run is known, so that both
// overlap with the work that needs it (the move waits for an RCU grace
// period on cgroup v1). With Preload the first is the whole run but for
// the request, and the interpreter starts before the second comes (see
// superviseLoaded).
func (sv *runSupervisor) supervise() status {
	dec := json.NewDecoder(sv.cfg)
	var base Spec
	if err := dec.Decode(&base); err != nil {
		return status{Error: "reading the run spec: " + err.Error()}
	}
	stage, err := startStage(base)
	if err != nil {
		return status{Error: err.Error()}
	}
	if base.Preload != nil {
		return sv.superviseLoaded(stage, base, dec)
	}
	spec, err := sv.receiveSpec(dec, nil)
	if err == nil {
		sv.begin()
		err = enterRun(spec)
	}
	if err != nil {
		stage.abort()
		return status{Error: err.Error()}
	}
	// The run directory is the run's own tmpfs now: record it before the
	// program starts, to collect what the program changed once it is gone.
	before, collect := recordRunDir(spec)
	child, err := stage.start(spec)
	if err != nil {
		return status{Error: err.Error()}
	}
	return sv.endRun(child, waitExit(child), spec, before, collect)
}

// superviseLoaded supervises a run whose interpreter starts ahead (see
// Preload): it enters the run's isolation and has the exec stage start the
// interpreter with base at once, then waits for the run's Spec (or a stop
// request, or the interpreter's end: a run that never began). The run then
// gets its copy of the run directory, its egress listener and the message
// that starts the program; the server is told the run has begun only once
// the interpreter has the message, so that one that died while it waited
// is a run that can start afresh.
func (sv *runSupervisor) superviseLoaded(stage *execStage, base Spec, dec *json.Decoder) status {
	src, err := openRunDir(base)
	if err == nil && base.Isolation.Namespaces() {
		// The run directory is still empty: it is copied at the hand-over.
		err = enterIsolation(base, nil)
	}
	if err != nil {
		stage.abort()
		closeRoot(src)
		return status{Error: err.Error()}
	}
	child, err := stage.start(base)
	if err != nil {
		closeRoot(src)
		return status{Error: err.Error()}
	}
	exited := waitExit(child)
	err = sv.awaitLoaded(stage, exited)
	var spec Spec
	if err == nil {
		spec, err = sv.receiveSpec(dec, exited)
	}
	if err == nil && src != nil {
		err = copyTree(src, spec.Dir)
	}
	closeRoot(src)
	if err == nil && spec.EgressAddr != "" {
		err = sendEgressListener(spec.EgressAddr, spec.EgressFD)
	}
	var before artifacts.Snapshot
	var collect bool
	if err == nil {
		before, collect = recordRunDir(spec)
		err = stage.release(spec.Preload)
	}
	if err != nil {
		killDescendants(child)
		return status{Error: err.Error()}
	}
	sv.begin()
	return sv.endRun(child, exited, spec, before, collect)
}

// startStage makes this process the run's child subreaper and starts the
// exec stage of base.
func startStage(base Spec) (*execStage, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("becoming a child subreaper: %w", err)
	}
	if base.Isolation.PID && base.Isolation.Mount {
		// The exec stage starts before the run's root is built: give this
		// mount namespace a /proc of the run's PID namespace first, where
		// the stage's pid (in which Go writes its uid map) is its own.
		if err := mountOwnProc(); err != nil {
			return nil, err
		}
	}
	var limits *nsLimits
	if base.Isolation.User {
		// Opened now, while the supervisor still sees the host's /proc.
		var err error
		if limits, err = openNamespaceLimits(); err != nil {
			return nil, err
		}
	}
	stage, err := forkExecStage(base, func() error {
		// The exec stage runs, and its user namespace is mapped: now no
		// more namespaces may be created in the run's, and nothing of the
		// run may trace or read this process.
		if err := limits.apply(); err != nil {
			return err
		}
		return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	})
	if err != nil {
		limits.close()
		return nil, err
	}
	return stage, nil
}

// receiveSpec waits for the whole run's Spec, or for a stop request, or
// for exited (nil: never), the end of an interpreter started ahead.
func (sv *runSupervisor) receiveSpec(dec *json.Decoder, exited <-chan syscall.WaitStatus) (Spec, error) {
	specCh := make(chan error, 1)
	var spec Spec
	go func() { specCh <- dec.Decode(&spec) }()
	select {
	case err := <-specCh:
		if err != nil {
			return Spec{}, fmt.Errorf("reading the run spec: %w", err)
		}
	case <-sv.stopReq:
		return Spec{}, errors.New("stopped before the run began")
	case ws := <-exited:
		return Spec{}, endedEarly(ws)
	}
	_ = sv.cfg.Close()
	return spec, nil
}

// awaitLoaded waits until the interpreter started ahead has loaded, and
// tells the server (see Prepared.Loaded); or for a stop request, or for
// the interpreter's end.
func (sv *runSupervisor) awaitLoaded(stage *execStage, exited <-chan syscall.WaitStatus) error {
	select {
	case err := <-stage.awaitLoaded():
		if err != nil {
			return err
		}
	case <-sv.stopReq:
		return errors.New("stopped before the run began")
	case ws := <-exited:
		return endedEarly(ws)
	}
	_, _ = sv.status.Write([]byte{loaded})
	return nil
}

// endedEarly is the error of an interpreter started ahead that ended, with
// status ws, before its run.
func endedEarly(ws syscall.WaitStatus) error {
	code, sig := exitOf(ws)
	if sig != "" {
		return fmt.Errorf("the interpreter started ahead ended before its run (status %d, %s)", code, sig)
	}
	return fmt.Errorf("the interpreter started ahead ended before its run (status %d)", code)
}

// begin tells the server the run has begun (see readStatus).
func (sv *runSupervisor) begin() {
	_, _ = sv.status.Write([]byte{received})
	setName(nameRunning)
}

// enterRun enters the run's isolation, with a copy of the host's run
// directory, and hands its egress listener over.
func enterRun(spec Spec) error {
	if spec.Isolation.Namespaces() {
		src, err := openRunDir(spec)
		if err != nil {
			return err
		}
		err = enterIsolation(spec, src)
		closeRoot(src)
		if err != nil {
			return err
		}
	}
	if spec.EgressAddr != "" {
		if err := sendEgressListener(spec.EgressAddr, spec.EgressFD); err != nil {
			return err
		}
	}
	return nil
}

// recordRunDir records the run directory before the program starts, when
// the run collects its artifacts there (its own tmpfs), and says whether
// it does.
func recordRunDir(spec Spec) (artifacts.Snapshot, bool) {
	if spec.Collect == nil || !spec.Isolation.Mount {
		return artifacts.Snapshot{}, false
	}
	before, _ := artifacts.TakeContents(artifacts.DirSource{Dir: spec.Dir}, spec.Collect.options())
	return before, true
}

// endRun waits for the program child to end (see wait), kills every
// descendant, and collects the artifacts against before when collect is
// set.
func (sv *runSupervisor) endRun(child int, exited <-chan syscall.WaitStatus, spec Spec, before artifacts.Snapshot, collect bool) status {
	st := status{Started: true}
	st.ExitCode, st.Signal = exitOf(sv.wait(child, exited))
	killDescendants(child)
	if collect {
		c, err := artifacts.Collect(artifacts.DirSource{Dir: spec.Dir}, before, spec.Collect.options())
		if err != nil {
			c.Incomplete = "the working directory could not be read to the end (" + err.Error() + ")"
		}
		st.Artifacts = toWire(c)
	}
	return st
}

// waitExit waits for child in the background; the channel gets its status.
func waitExit(child int) <-chan syscall.WaitStatus {
	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(child, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			exited <- ws
			return
		}
	}()
	return exited
}

// wait waits for the program child to end (exited, from waitExit), killing
// its process group on a stop request first.
func (sv *runSupervisor) wait(child int, exited <-chan syscall.WaitStatus) syscall.WaitStatus {
	select {
	case ws := <-exited:
		return ws
	case <-sv.stopReq:
		_ = syscall.Kill(-child, syscall.SIGKILL)
		return <-exited
	}
}

// execStage is the exec stage, started before the run's Spec is known and
// waiting for it on its fd 3; or, when nothing must be applied to the
// program (direct), the program itself, started when the Spec comes.
type execStage struct {
	pid     int
	w       *os.File
	joined  chan error
	direct  bool
	started func() error
	// preload is the supervisor's end of the socket pair whose other end
	// is the fd 3 of an interpreter started ahead (Spec.Preload); nil
	// without one.
	preload *os.File
}

// preloadFD is where the exec stage finds its end of the socket pair that
// becomes the fd 3 of an interpreter started ahead.
const preloadFD = 4

// awaitLoaded returns a channel that gets nil once the interpreter started
// ahead has loaded (it wrote PreloadReady), or why not.
func (s *execStage) awaitLoaded() <-chan error {
	ch := make(chan error, 1)
	go func() {
		var b [1]byte
		n, err := s.preload.Read(b[:])
		switch {
		case n == 1 && b[0] == PreloadReady:
			ch <- nil
		case err == nil:
			ch <- fmt.Errorf("the interpreter started ahead wrote %q, not its ready byte", b[:n])
		default:
			ch <- fmt.Errorf("the interpreter started ahead did not load: %w", err)
		}
	}()
	return ch
}

// release hands an interpreter started ahead, loaded, its run: it writes
// the message of p and closes the socket. An error means the interpreter
// is gone and has not read it.
func (s *execStage) release(p *Preload) error {
	if p == nil || s.preload == nil {
		return errors.New("the run's Spec does not start an interpreter that waits for it")
	}
	_, err := s.preload.Write(append([]byte(nil), p.Message...))
	if cerr := s.preload.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("the interpreter started ahead did not take its run: %w", err)
	}
	return nil
}

// closeRoot closes src unless it is nil.
func closeRoot(src *os.Root) {
	if src != nil {
		_ = src.Close()
	}
}

// forkExecStage starts the exec stage in a new process group (and, with a
// user namespace, a nested one where the program is ProgramUID), calls
// started, and moves it into the run's cgroups in the background. base
// holds what decides how it starts (see supervisorMain).
func forkExecStage(base Spec, started func() error) (*execStage, error) {
	if !base.needsExecStage() {
		// Nothing to apply before the program starts (mode none): the
		// program starts directly, sparing a second start of this binary.
		return &execStage{direct: true, started: started}, nil
	}
	exe := "/proc/self/fd/" + strconv.Itoa(exeFD)
	if !base.Isolation.Namespaces() {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the codeexec binary: %w", err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if base.Isolation.User {
		programUserNamespace(sys)
	}
	// With a mount namespace the stage starts in the host's root, which
	// pivot_root then turns into the run's minimal root for it too; it
	// changes into the run directory once the Spec has come.
	dir := base.Dir
	if base.Isolation.Mount {
		dir = "/"
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: []string{"GORACE=atexit_sleep_ms=0"}, Files: []uintptr{0, 1, 2, r.Fd()}, Sys: sys}
	var preload *os.File
	if base.Preload != nil {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("the interpreter's socket pair: %w", err)
		}
		preload = os.NewFile(uintptr(fds[0]), "preload")
		theirs := os.NewFile(uintptr(fds[1]), "preload")
		defer theirs.Close()
		attr.Files = append(attr.Files, theirs.Fd()) // preloadFD
	}
	pid, err := syscall.ForkExec(exe, []string{exe, execArg}, attr)
	if err != nil {
		w.Close()
		if preload != nil {
			preload.Close()
		}
		return nil, fmt.Errorf("starting the program: %w", err)
	}
	s := &execStage{pid: pid, w: w, joined: make(chan error, 1), preload: preload}
	if err := started(); err != nil {
		s.abort()
		return nil, err
	}
	go func() { s.joined <- joinCgroups(pid, base.CgroupFDs) }()
	return s, nil
}

// start hands the Spec to the exec stage (once it is in the run's cgroups),
// or starts the program directly, and returns the program's pid.
func (s *execStage) start(spec Spec) (int, error) {
	if s.direct {
		attr := &syscall.ProcAttr{
			Dir:   spec.Dir,
			Env:   spec.Env,
			Files: []uintptr{0, 1, 2},
			Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		}
		pid, err := syscall.ForkExec(spec.Path, append([]string{spec.Path}, spec.Args...), attr)
		if err != nil {
			return 0, fmt.Errorf("starting %s: %w", spec.Path, err)
		}
		return pid, s.started()
	}
	if err := <-s.joined; err != nil {
		s.abort()
		return 0, fmt.Errorf("moving the program into its cgroup: %w", err)
	}
	err := json.NewEncoder(s.w).Encode(spec)
	s.w.Close()
	if err != nil {
		s.abort()
		return 0, fmt.Errorf("handing the run to the exec stage: %w", err)
	}
	return s.pid, nil
}

// abort kills the exec stage before it started the program.
func (s *execStage) abort() {
	if s.direct {
		return
	}
	_ = s.w.Close()
	if s.preload != nil {
		_ = s.preload.Close()
	}
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(s.pid, &ws, 0, nil); err != syscall.EINTR {
			return
		}
	}
}

// killDescendants kills the program's process group and every process the
// supervisor has left as descendants, then reaps them, until none is left.
// Orphans of the run are re-parented to the supervisor (a child subreaper), so
// walking its descendants finds daemons that left the process group.
func killDescendants(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	self := os.Getpid()
	if self == 1 {
		// The supervisor is the init of the run's PID namespace: kill(-1)
		// reaches every process in it, and no process outside it.
		for {
			_ = syscall.Kill(-1, syscall.SIGKILL)
			reapAll()
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); errors.Is(err, syscall.ECHILD) {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	for round := 0; ; round++ {
		reapAll()
		// With no child left there is no descendant either: an orphan of
		// the run is re-parented to this subreaper, so it is a child. That
		// spares the /proc walk in the common case.
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); errors.Is(err, syscall.ECHILD) {
			return
		}
		desc := descendants(self)
		if len(desc) == 0 {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); errors.Is(err, syscall.ECHILD) {
				return
			}
		}
		for _, pid := range desc {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if round > 0 {
			time.Sleep(time.Millisecond)
		}
		if round > 10000 {
			return
		}
	}
}

// reapAll collects every child that has already exited.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}

// descendants lists the live processes below root, read from /proc.
func descendants(root int) []int {
	procs := procTable()
	var out []int
	for _, pid := range subtree(procs, root) {
		if !procs[pid].zombie {
			out = append(out, pid)
		}
	}
	return out
}

func exitOf(ws syscall.WaitStatus) (int, string) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), signalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}
