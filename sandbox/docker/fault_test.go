package docker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestContainerStoppedFromOutside kills or removes a run's container behind
// the Runner's back while the program runs (as an engine that stops does):
// the run ends with an error that says so, never with a result that looks
// like the program's own exit, and nothing is left behind.
func TestContainerStoppedFromOutside(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		how  string
		pool int
	}{
		{"kill/cold", 0},
		{"kill/warm", 1},
		{"rm -f/cold", 0},
	} {
		t.Run(c.how, func(t *testing.T) {
			t.Parallel()
			r, cli := newRunner(t, poolConfig(c.pool, "bash"))
			if c.pool > 0 {
				waitWarm(t, r, "bash", c.pool)
			}
			m := sandboxtest.Marker()
			errc := make(chan error, 1)
			resc := make(chan *sandbox.Result, 1)
			req := sandboxtest.Req("bash", "echo started; sleep "+m+"; echo finished")
			started := sandboxtest.Started(&req)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err := r.Run(ctx, req)
				resc <- res
				errc <- err
			}()
			select {
			case <-started:
			case res := <-resc:
				t.Fatalf("the run ended before its container was stopped: %+v %v", res, <-errc)
			}
			ids, warm := servedOf(r).List()
			if len(ids) != 1 || warm[0] != (c.pool > 0) {
				t.Fatalf("served by %v (warm %v), want one container, warm=%v", ids, warm, c.pool > 0)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var err error
			if strings.HasPrefix(c.how, "kill") {
				_, err = cli.ContainerKill(ctx, ids[0], client.ContainerKillOptions{Signal: "KILL"})
			} else {
				_, err = cli.ContainerRemove(ctx, ids[0], client.ContainerRemoveOptions{Force: true})
			}
			if err != nil {
				t.Fatalf("%s: %v", c.how, err)
			}
			var res *sandbox.Result
			select {
			case res = <-resc:
				err = <-errc
			case <-time.After(time.Minute):
				t.Fatalf("the run did not return within a minute of its container being stopped")
			}
			if res != nil || !errors.Is(err, sandbox.ErrSandboxUnavailable) {
				t.Fatalf("Run = %+v, %v; want no result and an error wrapping ErrSandboxUnavailable", res, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "Docker Engine") || strings.Contains(msg, "\n") {
				t.Errorf("the error does not name the engine in one line: %q", msg)
			}
			if left := lingering(t, r, cli, time.Minute); len(left) > 0 {
				t.Errorf("containers left behind: %v", left)
			}
			// The Runner keeps working.
			if res := run(t, r, sandboxtest.Req("bash", "echo $((6*7))")); res.Stdout != "42\n" {
				t.Errorf("the next run: %+v", res)
			}
		})
	}
}
