package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestStdioCancelBeforeStart: a tools/call cancelled while it waits in
// mcp-go's queue for a worker (all of the stdio transport's 100 are busy)
// never runs its code. mcp-go alone drops such a cancellation: the call's
// cancel function is registered only once a worker takes it.
func TestStdioCancelBeforeStart(t *testing.T) {
	t.Parallel()
	const workers = 100 // ServeStdio's worker pool
	started := make(chan string, workers)
	var (
		mu         sync.Mutex
		victimLive []bool // whether each run of the victim had a live context
	)
	opts := testOptions()
	opts.MaxConcurrency = workers + 10
	s := New(&sandboxtest.Fake{Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess}, RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
		if req.Code == "victim" {
			mu.Lock()
			victimLive = append(victimLive, ctx.Err() == nil)
			mu.Unlock()
			return &sandbox.Result{Sandbox: sandbox.ModeProcess}, nil
		}
		started <- req.Code
		<-ctx.Done()
		return nil, ctx.Err()
	}}, opts)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(ctx, inR, outW) }()
	var answersMu sync.Mutex
	answers := map[int]chan json.RawMessage{}
	answer := func(id int) chan json.RawMessage {
		answersMu.Lock()
		defer answersMu.Unlock()
		if answers[id] == nil {
			answers[id] = make(chan json.RawMessage, 1)
		}
		return answers[id]
	}
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var msg struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &msg) == nil && msg.ID != nil {
				answer(*msg.ID) <- append(json.RawMessage(nil), sc.Bytes()...)
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		inW.Close()
		outR.Close()
		<-done
	})
	send := func(format string, args ...any) {
		t.Helper()
		if _, err := fmt.Fprintf(inW, format+"\n", args...); err != nil {
			t.Fatal(err)
		}
	}
	await := func(id int) json.RawMessage {
		t.Helper()
		select {
		case m := <-answer(id):
			return m
		case <-time.After(time.Minute): // bounds a hang only
			t.Fatalf("no answer to request %d", id)
			return nil
		}
	}
	callLine := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"code_execute","arguments":{"language":"python","code":%q}}}`
	cancelLine := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"test"}}`

	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	await(0)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for id := 1; id <= workers; id++ {
		send(callLine, id, fmt.Sprintf("hold %d", id))
	}
	for range workers {
		select {
		case <-started:
		case <-time.After(time.Minute): // bounds a hang only
			t.Fatal("the holding calls did not all start")
		}
	}
	// Every worker holds a call: the victim waits in the queue. Cancel it
	// there; the ping's answer shows that the cancellation has been read.
	const victim, ping = workers + 1, workers + 2
	send(callLine, victim, "victim")
	send(cancelLine, victim)
	send(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, ping)
	await(ping)
	// Free a worker: it takes the victim next.
	send(cancelLine, 1)
	await(1)
	await(victim)
	mu.Lock()
	defer mu.Unlock()
	for _, live := range victimLive {
		if live {
			t.Fatalf("the call cancelled while queued ran its code")
		}
	}
}
