package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/egress"
	"github.com/codeexec/codeexec/sandbox/egress/proxy"
	"github.com/codeexec/codeexec/sandbox/internal/runproto"
)

// Egress in kubernetes mode (CODE_EXEC_NETWORK=allowlist): each run pod
// that has egress gets the relay of relay.go, started over pods/exec by
// start before the pod is handed a program (warm pods at fill time), and a
// session of codeexec's egress proxy served on the relay's connections.
// The run's result carries the session's report.

// relayStartTimeout bounds the relay's way to listening, once its pod runs.
const relayStartTimeout = time.Minute

// podEgress is one pod's relay and proxy session.
type podEgress struct {
	mux     *relayMux
	session *proxy.Session
	stream  chan struct{} // closed once the exec stream ended
	stderr  boundedBuffer

	closeOnce sync.Once
	report    *egress.Report
}

// startRelay execs the relay in the run container of s, waits until it
// listens and serves the pod's proxy session on its connections. On error
// nothing of it is left running (the caller discards the pod).
func (r *Runner) startRelay(ctx context.Context, s *podSession) (*podEgress, error) {
	exec, err := r.executor(s.name, "exec", &corev1.PodExecOptions{Container: containerName, Command: relayCommand(r.python, relayPort), Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w: the egress relay of the pod %s: %v", sandbox.ErrSandboxUnavailable, s.name, err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	streamCtx, stopStream := context.WithCancel(context.Background())
	e := &podEgress{mux: newRelayMux(inW), stream: make(chan struct{})}
	e.mux.onEnd = func() {
		// The relay reads the end of its stdin and exits; the stream ends.
		_ = inW.CloseWithError(io.EOF)
		_ = outR.CloseWithError(errRelayEnded)
		stopStream()
	}
	go func() {
		defer close(e.stream)
		err := exec.StreamWithContext(streamCtx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &e.stderr})
		if err != nil {
			r.log.Debug("the egress relay's stream ended with an error", "pod", s.name, "err", err)
		}
		_ = outW.CloseWithError(io.EOF)
	}()
	go e.mux.serve(outR)

	t := time.NewTimer(relayStartTimeout)
	defer t.Stop()
	select {
	case <-e.mux.ready:
		e.session = r.cfg.Egress.Serve(s.name, e.mux)
		go func() {
			select {
			case <-e.mux.done:
				// A warm pod whose relay ended is of no use: the pool
				// replaces it. (A run's relay ends with its program.)
				s.markBroken()
			case <-s.stop:
			}
		}()
		return e, nil
	case <-e.mux.done:
		// What the relay said, once its stream has ended.
		select {
		case <-e.stream:
		case <-t.C:
		}
		err = fmt.Errorf("kubernetes: %w: the egress relay of the pod %s did not start: %v%s", sandbox.ErrSandboxUnavailable, s.name, e.mux.Err(), e.stderr.detail())
	case <-t.C:
		err = fmt.Errorf("kubernetes: %w: the egress relay of the pod %s did not listen within %s%s", sandbox.ErrSandboxUnavailable, s.name, relayStartTimeout, e.stderr.detail())
	case <-ctx.Done():
		err = fmt.Errorf("kubernetes: cancelled while the egress relay of the pod %s started: %w", s.name, ctx.Err())
	case <-r.done:
		err = fmt.Errorf("kubernetes: %w while the egress relay of the pod %s started", sandbox.ErrClosed, s.name)
	}
	e.mux.end(errors.New("the relay did not start"))
	return nil, err
}

// close ends the proxy session (every connection of the run) and the relay's
// stream, and returns the session's report. It is safe to call more than
// once; later calls return the same report.
func (e *podEgress) close() *egress.Report {
	e.closeOnce.Do(func() {
		if e.session != nil {
			e.report = e.session.Close()
		}
		e.mux.Close()
	})
	return e.report
}

// networkReport ends the egress of s, once its program has ended, and puts
// its report in res.
func (r *Runner) networkReport(s *podSession, res *sandbox.Result) {
	if s.egress == nil {
		return
	}
	rep := s.egress.close()
	if res != nil {
		res.Network = rep
	}
}

// egressEnv is the environment that a pod with egress adds to podEnv: the
// proxy variables, pointing at the relay.
func egressEnv() []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range egress.ProxyEnv(relayAddr) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	return env
}

// podEnvOf is the environment of spec's pod.
func podEnvOf(spec podSpec) []corev1.EnvVar {
	if !spec.egress {
		return podEnv
	}
	return append(append([]corev1.EnvVar(nil), podEnv...), egressEnv()...)
}

// checkEgress runs one pod that reaches the proxy the way runs do: an image
// without python3, or a cluster whose API server or runtime does not carry
// pods/exec streams, makes New fail here rather than every run later.
func (r *Runner) checkEgress(ctx context.Context) error {
	fail := func(detail string) error {
		return fmt.Errorf("kubernetes: %w: CODE_EXEC_NETWORK=allowlist: a pod cannot reach the egress proxy through its relay (a python3 program over pods/exec): %s", sandbox.ErrSandboxUnavailable, detail)
	}
	if r.python == "" {
		return fail("the image " + r.cfg.Image + " has no python3, which runs the relay")
	}
	spec := podSpec{
		role:     roleProbe,
		cmd:      []string{"/bin/sh", "-c", ulimits(probeLimits) + `exec "$@"`, "codeexec-egress-check", r.python, "-I", "-S", "-B", "-c", runproto.EgressCheckProgram(relayHost, relayPort)},
		limits:   containerLimits(probeLimits),
		deadline: runDeadline(time.Now(), probeLimits.Timeout),
		egress:   true,
	}
	s, err := r.start(ctx, spec)
	if err != nil {
		return fail(err.Error())
	}
	// The program reads a line first: it starts once the relay listens.
	res, err, _ := r.exchange(ctx, s, strings.NewReader("go\n"), probeLimits, nil, nil, false)
	rep := s.egress.close()
	r.discard(s)
	if err != nil {
		return fail(err.Error())
	}
	if d := runproto.EgressCheckFailure(res, rep); d != "" {
		return fail(d)
	}
	return nil
}

// egressDetail is what the network protection adds under egress.
func (r *Runner) egressDetail() string {
	if r.cfg.Egress == nil {
		return ""
	}
	return "; the one way out is codeexec's egress proxy (CODE_EXEC_NETWORK=allowlist), reached at " + relayAddr +
		" in the pod through a relay (python3, one process of the run's user, not dumpable) that carries each connection over a pods/exec stream of the pod's own: no network path from the pod to the server"
}

// egressInfo is sandbox_info's network policy: nil without egress.
func (r *Runner) egressInfo() *egress.PolicyInfo {
	if r.cfg.Egress == nil {
		return nil
	}
	return r.cfg.Egress.Policy().Info(true, relayAddr)
}

// boundedBuffer keeps the first bytes written to it (a relay's stderr).
type boundedBuffer struct {
	mu sync.Mutex
	b  []byte
}

const boundedBufferMax = 4 << 10

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := boundedBufferMax - len(b.b); room > 0 {
		b.b = append(b.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// detail is what was written, as the end of a sentence ("" when nothing).
func (b *boundedBuffer) detail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := strings.TrimSpace(string(b.b)); s != "" {
		return " (it said: " + s + ")"
	}
	return ""
}
