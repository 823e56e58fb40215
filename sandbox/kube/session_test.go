package kube

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

// closeChecked is a session backend whose sessions check, as they close,
// that their pod is gone from the cluster.
type closeChecked struct {
	t *testing.T
	r *Runner
	b sessions.Backend
}

func (b closeChecked) Start(ctx context.Context, spec sessions.Spec) (sessions.Session, error) {
	s, err := b.b.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return closeCheckedSession{s, b}, nil
}

type closeCheckedSession struct {
	sessions.Session
	b closeChecked
}

func (s closeCheckedSession) Close() error {
	err := s.Session.Close()
	name := s.Session.(*sessionPod).name
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if gerr := waitGone(ctx, s.b.r, name); gerr != nil {
		s.b.t.Errorf("the session's pod %s is still there after Close: %v", name, gerr)
	}
	return err
}

// sessionPods lists r's session pods that the API server has.
func sessionPods(t testing.TB, r *Runner) []string {
	t.Helper()
	return podNames(t, r.c, LabelReplica+"="+r.replica+","+LabelRole+"="+roleSession)
}

// startSession starts a session of lang on r with the tests' limits (lim's
// CPUs scaled down); it is closed at cleanup.
func startSession(t *testing.T, r *Runner, lang string, lim sandbox.Limits) *sessionPod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := r.Sessions().Start(ctx, sessions.Spec{ID: "ses_test", Language: lang, Limits: kubetest.Limits(lim), Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("starting a %s session: %v", lang, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s.(*sessionPod)
}

// TestSessionSuite runs the session suite of every mode on session pods;
// every session's pod must be gone once the session is closed.
func TestSessionSuite(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{})
	t.Cleanup(func() {
		if left := sessionPods(t, r); len(left) > 0 {
			t.Errorf("session pods left after the suite: %v", left)
		}
	})
	sandboxtest.RunSessionSuite(t, closeChecked{t, r, kubetest.Sessions{Backend: r.Sessions()}}, sandboxtest.SessionOptions{
		Mode: sandbox.ModeKubernetes, ScrubsEnv: true,
		// Each closed session checks that its pod is gone (closeChecked).
		Gone: func(t *testing.T, dir string) bool { return dir == "/tmp" },
	})
}

// A session's pod is a run's: the same lockdown, with the role "session" and
// a deadline after the session's; Close deletes it.
func TestSessionPodLockdown(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python"}})
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lim := kubetest.Limits(sandboxtest.DefaultLimits())
	ses, err := r.Sessions().Start(ctx, sessions.Spec{ID: "ses_test", Language: "python", Limits: lim, Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	s := ses.(*sessionPod)
	pod, err := r.c.Pods.Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := r.podObject("x", r.runSpec("python", lim, roleRun, deadline))
	// What the API server added (defaults) aside, the pod is a run's.
	got, want := pod.Spec.Containers[0], run.Spec.Containers[0]
	sc, wsc := got.SecurityContext, want.SecurityContext
	for what, same := range map[string]bool{
		"security context": *sc.AllowPrivilegeEscalation == *wsc.AllowPrivilegeEscalation && *sc.ReadOnlyRootFilesystem && *sc.RunAsNonRoot &&
			!*sc.Privileged && reflect.DeepEqual(sc.Capabilities.Drop, wsc.Capabilities.Drop) && len(sc.Capabilities.Add) == 0,
		"resources":     equality.Semantic.DeepEqual(got.Resources.Limits, want.Resources.Limits) && equality.Semantic.DeepEqual(got.Resources.Requests, want.Resources.Requests),
		"environment":   reflect.DeepEqual(got.Env, want.Env) && got.WorkingDir == want.WorkingDir,
		"image":         got.Image == want.Image && len(got.VolumeMounts) == len(want.VolumeMounts),
		"pod":           !*pod.Spec.AutomountServiceAccountToken && !*pod.Spec.EnableServiceLinks && pod.Spec.DNSPolicy == run.Spec.DNSPolicy,
		"user":          *pod.Spec.SecurityContext.RunAsUser >= runUIDFirst && *pod.Spec.SecurityContext.RunAsNonRoot,
		"seccomp":       equality.Semantic.DeepEqual(pod.Spec.SecurityContext.SeccompProfile, run.Spec.SecurityContext.SeccompProfile),
		"volumes":       len(pod.Spec.Volumes) == 2 && equality.Semantic.DeepEqual(pod.Spec.Volumes[0].EmptyDir, run.Spec.Volumes[0].EmptyDir) && equality.Semantic.DeepEqual(pod.Spec.Volumes[1].EmptyDir, run.Spec.Volumes[1].EmptyDir),
		"runtime class": reflect.DeepEqual(pod.Spec.RuntimeClassName, run.Spec.RuntimeClassName),
	} {
		if !same {
			t.Errorf("the session's pod differs from a run's in its %s:\n got %+v\nwant %+v", what, pod.Spec, run.Spec)
		}
	}
	p := pod.Spec
	if pod.Labels[LabelRole] != roleSession || pod.Labels[LabelLanguage] != "python" || pod.Labels[LabelReplica] != r.replica {
		t.Errorf("labels %v", pod.Labels)
	}
	dl, err := time.Parse(time.RFC3339, pod.Annotations[AnnotationDeadline])
	if err != nil || dl.Before(deadline) || p.ActiveDeadlineSeconds == nil || *p.ActiveDeadlineSeconds < int64(time.Until(deadline)/time.Second) {
		t.Errorf("deadline %q (active deadline %v), want after the session's %v", pod.Annotations[AnnotationDeadline], p.ActiveDeadlineSeconds, deadline)
	}
	res := sandboxtest.SessionCall(t, s, "python", "import os\nprint(os.getuid() != 0, os.getcwd())")
	if res.Stdout != "True /tmp\n" || res.Sandbox != sandbox.ModeKubernetes {
		t.Fatalf("stdout %q sandbox %s, want a non-root user in /tmp", res.Stdout, res.Sandbox)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(ctx, r, s.name); err != nil {
		t.Fatalf("the session's pod is still there after Close: %v", err)
	}
	if _, err := s.Exec(ctx, sandboxtest.Req("python", "1")); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("a call after Close: %v, want sandbox.ErrClosed", err)
	}
}

// A session that no call uses ends after the idle timeout (the Manager's),
// and its pod is deleted.
func TestSessionIdleTimeoutDeletesThePod(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"bash"}})
	m := sessions.New(sessions.Config{Backend: kubetest.Sessions{Backend: r.Sessions()}, MaxSessions: 1, IdleTimeout: time.Second, MaxLifetime: time.Hour, Logger: testLogger(t)})
	t.Cleanup(func() { _ = m.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, "alice", sessions.CreateOptions{Language: "bash", Limits: sandboxtest.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	pods := sessionPods(t, r)
	if len(pods) != 1 {
		t.Fatalf("session pods %v, want one", pods)
	}
	if err := waitGone(ctx, r, pods[0]); err != nil {
		t.Fatalf("the idle session's pod: %v", err)
	}
	if _, err := m.Exec(ctx, "alice", info.ID, sandboxtest.Req("bash", "echo hi")); !errors.Is(err, sessions.ErrUnknownSession) {
		t.Fatalf("a call after the idle timeout: %v, want ErrUnknownSession", err)
	}
}

// The session pods of a replica that died (its Lease no longer renewed) are
// deleted by another replica's sweep.
func TestSessionPodSweptAfterItsReplicaDied(t *testing.T) {
	dead := newRunner(t, Config{Languages: []string{"bash"}})
	s := startSession(t, dead, "bash", sandboxtest.DefaultLimits())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The replica stops renewing its Lease, as a server killed with
	// SIGKILL does, and its last renewal is long past.
	dead.lease.stop()
	l, err := dead.c.Leases.Get(ctx, dead.replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Now().Add(-10 * time.Minute))
	l.Spec.RenewTime = &old
	if _, err := dead.c.Leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := newRunner(t, Config{Languages: []string{"bash"}})
	if _, err := other.sweep(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := other.c.Pods.Get(ctx, s.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the session pod %s of the dead replica is still there after the sweep (%v)", s.name, err)
	}
	if err := waitGone(ctx, dead, s.name); err != nil {
		t.Fatal(err)
	}
	// The session's next call says that its pod is gone.
	if _, err := s.Exec(ctx, sandboxtest.Req("bash", "echo hi")); !errors.Is(err, sandbox.ErrSandboxUnavailable) || !strings.Contains(err.Error(), "deleted from outside") {
		t.Fatalf("a call in a swept session: %v", err)
	}
}

// A call that goes over the memory limit is killed by it and loses the
// state, and says so; the files stay.
func TestSessionOOM(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python"}})
	if r.cfg.RuntimeClass == "gvisor" {
		t.Skip("not checked under gVisor: the host's OOM killer kills gVisor's kernel along with the interpreter, so the session's pod ends and its files are lost with its state, as in docker mode; see docs/modes.md#runtimes")
	}
	lim := sandboxtest.DefaultLimits()
	lim.MemoryBytes = 96 << 20
	s := startSession(t, r, "python", lim)
	sandboxtest.CheckSessionOOM(t, s)
}

// PID 1 of a session's pod reaps: the orphans of a call leave no zombie
// behind, and after a fork bomb that filled the processes limit and timed
// out, the next calls (each an exec into the pod) have their processes back.
func TestSessionReaps(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python", "bash"}})
	sandboxtest.CheckSessionReaps(t, kubetest.Sessions{Backend: r.Sessions()})
}

// sessionCall runs code in s with the tests' limits, its timeout timeout
// (0: theirs), and fails the test on an error.
func sessionCall(t *testing.T, s *sessionPod, lang, code string, timeout time.Duration) *sandbox.Result {
	t.Helper()
	req := sandboxtest.Req(lang, code)
	if timeout > 0 {
		req.Limits.Timeout = timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := s.Exec(ctx, req)
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	return res
}

// pyClients lists the processes of the pod whose parent is outside it (its
// PPid is 0): the session client of the call in flight, which the server
// runs over pods/exec.
const pyClients = `import ctypes, os, signal, socket, time
def clients():
    out = []
    for p in os.listdir('/proc'):
        if p.isdigit() and p != '1':
            try:
                st = open('/proc/%s/status' % p).read()
            except OSError:
                continue
            if '\nPPid:\t0\n' in st:
                out.append(int(p))
    return out
`

// pyAnswer reads what the supervisor answered on the connection s, to its
// end, into d.
const pyAnswer = `import os
d = b''
while True:
    b = s.recv(4096)
    if not b:
        break
    d += b
`

// The control channel of a session pod is the supervisor's alone: the
// session's code can neither write into a call's result through the exec'd
// client, nor trace it, nor take the supervisor's socket, nor get a command
// of its own served; killing or stopping the client ends the call, which is
// reported as killed with its state lost, never as a result of its making.
func TestSessionControlChannel(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python", "javascript"}})
	lostThenFresh := func(t *testing.T, s *sessionPod, res *sandbox.Result) {
		t.Helper()
		if !res.StateLost || res.ExitCode != 137 || res.Signal != "killed" || strings.Contains(res.Stdout, "FORGED") {
			t.Fatalf("exit %d signal %q state lost %v stdout %q; want a call killed with its state lost", res.ExitCode, res.Signal, res.StateLost, res.Stdout)
		}
		if got := sessionCall(t, s, "python", "print(open('kept').read(), 'y' in globals())", 0); got.Stdout != "yes False\n" || got.StateLost {
			t.Fatalf("the next call: stdout %q stderr %q; want the file, and the variable gone", got.Stdout, got.Stderr)
		}
	}
	t.Run("the client cannot be traced or written into", func(t *testing.T) {
		s := startSession(t, r, "python", sandboxtest.DefaultLimits())
		res := sessionCall(t, s, "python", pyClients+`res = []
for p in clients():
    try:
        open('/proc/%d/fd/1' % p, 'wb').write(b'O\0\0\0\x07FORGED\n')
        res.append('written')
    except OSError:
        res.append('denied')
    res.append('traced' if ctypes.CDLL(None).ptrace(16, p, 0, 0) == 0 else 'denied')
print(' '.join(res))`, 0)
		if res.Stdout != "denied denied\n" {
			t.Fatalf("stdout %q (stderr %q), want the one client's output and trace denied", res.Stdout, res.Stderr)
		}
	})
	t.Run("the socket is the supervisor's and serves no process of the session", func(t *testing.T) {
		for name, c := range map[string][2]string{
			// A process of the call that connects is dead when the
			// connection comes up.
			"python/a process of the call": {`import socket
try:
    socket.socket(socket.AF_UNIX).bind('\0codeexec-session')
    print('bound')
except OSError:
    print('taken')
s = socket.socket(socket.AF_UNIX)
s.connect('\0codeexec-session')
evil = b"open('evil', 'w').write('ran')"
s.sendall(b'call %d 0\n' % len(evil) + evil)`, pyAnswer + `print(d[:1], b'refused: the connecting process has ended' in d, os.path.exists('evil'))`},
			// The interpreter that goes on after the call (python's fork
			// of the one that ran it, whose fork handler connects) is
			// alive and stopped when the connection comes up: one of the
			// session's.
			"python/the interpreter": {`import os, socket
def connect():
    global s
    if 's' in globals():
        return
    s = socket.socket(socket.AF_UNIX)
    s.connect('\0codeexec-session')
    evil = b"open('evil', 'w').write('ran')"
    s.sendall(b'call %d 0\n' % len(evil) + evil)
os.register_at_fork(after_in_child=connect)
print('taken')`, pyAnswer + `print(d[:1], b"refused: the connecting process (pid %d) is one of the session's" % os.getpid() in d, os.path.exists('evil'))`},
		} {
			t.Run(name, func(t *testing.T) {
				s := startSession(t, r, "python", sandboxtest.DefaultLimits())
				if res := sessionCall(t, s, "python", c[0], 0); res.Stdout != "taken\n" {
					t.Fatalf("the connecting call: stdout %q stderr %q", res.Stdout, res.Stderr)
				}
				const want = "b'F' True False\n"
				if res := sessionCall(t, s, "python", c[1], 0); res.Stdout != want {
					t.Fatalf("stdout %q (stderr %q), want %q: the connection refused, its command never run", res.Stdout, res.Stderr, want)
				}
			})
		}
	})
	t.Run("a killed client ends the call", func(t *testing.T) {
		s := startSession(t, r, "python", sandboxtest.DefaultLimits())
		sessionCall(t, s, "python", "y = 41; open('kept', 'w').write('yes')", 0)
		lostThenFresh(t, s, sessionCall(t, s, "python", pyClients+"print('FORGED')\nfor p in clients():\n    os.kill(p, signal.SIGKILL)\ntime.sleep(60)", 0))
	})
	t.Run("a stopped client ends the call at its timeout", func(t *testing.T) {
		s := startSession(t, r, "python", sandboxtest.DefaultLimits())
		sessionCall(t, s, "python", "y = 41; open('kept', 'w').write('yes')", 0)
		res := sessionCall(t, s, "python", pyClients+"for p in clients():\n    os.kill(p, signal.SIGSTOP)\nprint('FORGED')\ntime.sleep(60)", 2*time.Second)
		if !res.TimedOut {
			t.Fatalf("timed out %v, want true", res.TimedOut)
		}
		lostThenFresh(t, s, res)
	})
}

// A call whose code kills the exec'd client of its channel ends killed,
// with its state lost, again and again, and the session goes on with its
// files: the kill -9 -1 of the server's recovery may land while the
// supervisor, which saw the connection end, starts the next interpreter
// (node takes long enough that it often does); the supervisor then starts
// it again rather than end the session.
func TestSessionClientKilledAgainAndAgain(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Config{Languages: []string{"python", "javascript"}})
	for _, tc := range []struct{ lang, write, kill, read string }{
		{"python", "open('kept', 'w').write('yes')",
			pyClients + "for p in clients():\n    os.kill(p, signal.SIGKILL)\ntime.sleep(60)",
			"print(open('kept').read())"},
		{"javascript", "require('fs').writeFileSync('kept', 'yes')", `const fs = require('fs')
for (const p of fs.readdirSync('/proc')) {
  if (!/^\d+$/.test(p) || p === '1') continue
  let st = ''
  try { st = fs.readFileSync('/proc/' + p + '/status', 'utf8') } catch (e) { continue }
  if (st.includes('\nPPid:\t0\n')) process.kill(+p, 'SIGKILL')
}
setTimeout(() => {}, 60000)`, "console.log(require('fs').readFileSync('kept', 'utf8'))"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			s := startSession(t, r, tc.lang, sandboxtest.DefaultLimits())
			sandboxtest.SessionCall(t, s, tc.lang, tc.write)
			for i := range 5 {
				res := sessionCall(t, s, tc.lang, tc.kill, 0)
				if !res.StateLost || res.Signal != "killed" {
					t.Fatalf("call %d that kills its client: state lost %v, signal %q, stderr %q", i+1, res.StateLost, res.Signal, res.Stderr)
				}
			}
			if res := sandboxtest.SessionCall(t, s, tc.lang, tc.read); res.Stdout != "yes\n" {
				t.Fatalf("after the kills: stdout %q stderr %q, want the file kept", res.Stdout, res.Stderr)
			}
		})
	}
}
