package server

import (
	"context"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/server/progress"
)

// progressClock keeps the progress values of one call increasing across
// everything that reports progress on it (the approval wait, then the
// output lines), as MCP requires.
type progressClock struct {
	mu   sync.Mutex
	last float64
}

type progressClockKey struct{}

// advance returns p, or just above the last value when p is not above it.
func (c *progressClock) advance(p float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p <= c.last {
		p = c.last + 1
	}
	c.last = p
	return p
}

func clockFrom(ctx context.Context) *progressClock {
	if c, ok := ctx.Value(progressClockKey{}).(*progressClock); ok {
		return c
	}
	return &progressClock{}
}

// progressToken returns the call's progress token, or nil.
func progressToken(call mcp.CallToolRequest) mcp.ProgressToken {
	if call.Params.Meta == nil {
		return nil
	}
	return call.Params.Meta.ProgressToken
}

// liveRun sends a run's output as progress notifications; a nil *liveRun
// sends nothing.
type liveRun struct {
	s     *Server
	lines *progress.Lines
	// queue is the session's notification queue, when it has one.
	queue chan<- mcp.JSONRPCNotification
}

// liveOutput prepares the progress notifications of a call: when the
// client sent a progress token (and the call is not a task's work, which
// has no request to report on), each output line becomes a notification,
// with keep-alives while the program is silent. The returned context
// carries the call's progress clock.
func (s *Server) liveOutput(ctx context.Context, call mcp.CallToolRequest) (context.Context, *liveRun) {
	clock := &progressClock{}
	ctx = context.WithValue(ctx, progressClockKey{}, clock)
	token := progressToken(call)
	if token == nil || inTask(ctx) {
		return ctx, nil
	}
	send := func(n progress.Notification) {
		_ = s.mcp.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token,
			"progress":      clock.advance(n.Progress),
			"message":       n.Message,
		})
	}
	l := &liveRun{s: s, lines: progress.New(send, progress.Options{})}
	if sess := mcpserver.ClientSessionFromContext(ctx); sess != nil {
		l.queue = sess.NotificationChannel()
	}
	return ctx, l
}

// drainWait bounds how long a call waits for its notifications to leave the
// session's queue before its result is returned.
const drainWait = 2 * time.Second

// waitDrained waits until the session's notification queue is empty, and a
// moment more, so that mcp-go's forwarder has written the last notification
// before the handler returns. mcp-go (v1.2.1) drains that queue itself before
// it writes the result over streamable HTTP, but a notification its
// forwarder has already taken but not yet written when the handler returns
// is dropped; waiting here makes that rare, not impossible (see
// docs/tools.md, "Live output").
func (l *liveRun) waitDrained() {
	if l.queue == nil {
		return
	}
	for deadline := time.Now().Add(drainWait); len(l.queue) > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond)
}

// observe is the run's sandbox.Request.Observe.
func (l *liveRun) observe() sandbox.ObserveFunc {
	if l == nil {
		return nil
	}
	return l.lines.Observe
}

// close sends what is left and stops the keep-alives; the notifications
// are all out when it returns, before the call's result.
func (l *liveRun) close() {
	if l == nil {
		return
	}
	l.lines.Close()
	l.waitDrained()
	if p := l.s.opts.Progress; p != nil {
		sent, lost := l.lines.Stats()
		p.ProgressSent(sent)
		p.ProgressDropped(lost)
	}
}
