package server

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codeexec/codeexec/sandbox"
)

// chanSession is a client session whose notifications land in a channel.
type chanSession struct {
	id string
	ch chan mcp.JSONRPCNotification
}

func (c chanSession) Initialize()                                         {}
func (c chanSession) Initialized() bool                                   { return true }
func (c chanSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return c.ch }
func (c chanSession) SessionID() string                                   { return c.id }

// TestOutputLinesAsProgress: with a progress token, each output line is a
// progress notification, in order, sent before the result; the progress
// values grow.
func TestOutputLinesAsProgress(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		if req.Observe == nil {
			t.Error("the request has no observer although the client sent a progress token")
			return &sandbox.Result{}, nil
		}
		req.Observe(sandbox.Stdout, []byte("first\nsec"))
		req.Observe(sandbox.Stdout, []byte("ond\n"))
		req.Observe(sandbox.Stderr, []byte("warn\n"))
		req.Observe(sandbox.Stdout, []byte("no newline"))
		return &sandbox.Result{Stdout: "first\nsecond\nno newline", Stderr: "warn\n", Sandbox: sandbox.ModeProcess}, nil
	})
	sess := chanSession{id: "p1", ch: make(chan mcp.JSONRPCNotification, 100)}
	ctx := s.mcp.WithContext(context.Background(), sess)
	c := call(map[string]any{"language": "python", "code": "print()"})
	c.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
	res, err := s.handleExecute(ctx, c)
	if err != nil || res.IsError {
		t.Fatalf("handleExecute: %v %+v", err, res)
	}
	close(sess.ch)
	var msgs []string
	last := 0.0
	for n := range sess.ch {
		p := n.Params.AdditionalFields
		if n.Method != "notifications/progress" || p["progressToken"] != "tok-1" {
			t.Errorf("notification %+v, want progress with the call's token", n)
		}
		if v, _ := p["progress"].(float64); v <= last {
			t.Errorf("progress %v after %v: it must grow", p["progress"], last)
		} else {
			last = v
		}
		msgs = append(msgs, p["message"].(string))
	}
	want := []string{"first", "second", "stderr: warn", "no newline"}
	if len(msgs) != len(want) {
		t.Fatalf("messages %q, want %q", msgs, want)
	}
	for i := range want {
		if msgs[i] != want[i] {
			t.Errorf("message %d = %q, want %q", i, msgs[i], want[i])
		}
	}
}

// TestNoProgressWithoutToken: without a progress token the run has no
// observer and nothing is sent.
func TestNoProgressWithoutToken(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		if req.Observe != nil {
			t.Error("the request has an observer although the client sent no progress token")
		}
		return &sandbox.Result{Sandbox: sandbox.ModeProcess}, nil
	})
	sess := chanSession{id: "p2", ch: make(chan mcp.JSONRPCNotification, 10)}
	if _, err := s.handleExecute(s.mcp.WithContext(context.Background(), sess), call(map[string]any{"language": "python", "code": "1"})); err != nil {
		t.Fatal(err)
	}
	// The call's notifications are all handed over before it returns.
	select {
	case n := <-sess.ch:
		t.Errorf("notification %+v without a progress token", n)
	default:
	}
}

func TestProgressClock(t *testing.T) {
	t.Parallel()
	var c progressClock
	for i, tt := range []struct{ in, want float64 }{{0.5, 0.5}, {12, 12}, {1, 13}, {2, 14}, {30, 30}} {
		if got := c.advance(tt.in); got != tt.want {
			t.Errorf("step %d: advance(%v) = %v, want %v", i, tt.in, got, tt.want)
		}
	}
}
