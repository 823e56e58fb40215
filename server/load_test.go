package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// echoRunner is a Runner that answers print("token") with token after a
// few milliseconds, as a short program would.
func echoRunner() *sandboxtest.Fake {
	return &sandboxtest.Fake{
		Caps: sandbox.Capabilities{Mode: sandbox.ModeProcess},
		RunFunc: func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
			select {
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			tok := strings.TrimSuffix(strings.TrimPrefix(req.Code, `print("`), `")`)
			return &sandbox.Result{Stdout: tok + "\n", Sandbox: sandbox.ModeProcess, Duration: 2 * time.Millisecond}, nil
		},
	}
}

// TestLoadGoroutines serves a runner limited to 4 runs at once over
// streamable HTTP, sends it 500 calls 32 at a time with the official go-sdk
// client, and checks that every call gets its own answer and that the
// server's goroutines come back to their level before the load (the binary
// cannot show its goroutines; the e2e load test checks its memory and
// threads with the real sandboxes). It compares counts, never durations,
// and is not parallel: other tests' goroutines would blur the count.
func TestLoadGoroutines(t *testing.T) {
	sandboxtest.SkipShort(t, "the load test sends 500 calls")
	const (
		calls       = 500
		concurrency = 32
		limit       = 4
		slack       = 8 // goroutines that may come and go (timers, idle connections)
	)
	start := runtime.NumGoroutine()

	opts := testOptions()
	opts.MaxConcurrency = limit
	runner := echoRunner()
	chain := sandbox.Limit(runner, limit)
	srv := New(chain, opts)
	handler, shutdown, err := srv.HTTPHandler(TransportHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(handler)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "codeexec-load", Version: "1"}, nil)
	var sessions []*sdk.ClientSession
	for range 4 {
		cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: ts.URL + "/mcp"}, nil)
		if err != nil {
			t.Fatalf("connecting: %v", err)
		}
		sessions = append(sessions, cs)
	}

	// drive sends n calls, concurrency at a time, each printing its own
	// token, and returns how many answers were wrong.
	drive := func(tag string, n int) int {
		type answer struct {
			stdout string
			ok     bool
			why    string
		}
		answers := make([]answer, n)
		next := make(chan int)
		var wg sync.WaitGroup
		for w := range concurrency {
			cs := sessions[w%len(sessions)]
			wg.Go(func() {
				for i := range next {
					tok := fmt.Sprintf("%s-%d", tag, i)
					res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolExecute, Arguments: map[string]any{
						"language": "python", "code": fmt.Sprintf("print(%q)", tok),
					}})
					switch {
					case err != nil:
						answers[i] = answer{why: err.Error()}
					case res.IsError:
						answers[i] = answer{why: fmt.Sprintf("isError: %v", res.Content)}
					default:
						var out ExecuteOutput
						b, _ := json.Marshal(res.StructuredContent)
						if err := json.Unmarshal(b, &out); err != nil {
							answers[i] = answer{why: err.Error()}
							continue
						}
						answers[i] = answer{stdout: out.Stdout, ok: out.Stdout == tok+"\n", why: "stdout " + strconv.Quote(out.Stdout)}
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		bad := 0
		for i, a := range answers {
			if !a.ok {
				bad++
				if bad <= 5 {
					t.Errorf("call %s-%d: %s", tag, i, a.why)
				}
			}
		}
		return bad
	}
	// settle polls until the goroutines are at most want; the minute only
	// bounds a leak (it returns as soon as they are).
	settle := func(want int) int {
		deadline := time.Now().Add(time.Minute)
		for {
			n := runtime.NumGoroutine()
			if n <= want || time.Now().After(deadline) {
				return n
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// A warm-up burst at full concurrency brings the connection pools and
	// sessions to their steady state; its level once every call has been
	// answered is the baseline (as high as it will be, if some goroutines
	// of the burst are still on their way out: the check is then looser,
	// never wrong).
	if bad := drive("warm", concurrency); bad > 0 {
		t.Fatalf("%d warm-up calls failed", bad)
	}
	baseline := runtime.NumGoroutine()
	peak := 0
	stopPeak := make(chan struct{})
	peakDone := make(chan struct{})
	go func() {
		defer close(peakDone)
		for {
			peak = max(peak, runtime.NumGoroutine())
			select {
			case <-stopPeak:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	if bad := drive("load", calls); bad > 0 {
		t.Fatalf("%d of %d calls failed", bad, calls)
	}
	close(stopPeak)
	<-peakDone
	after := settle(baseline + slack)
	t.Logf("goroutines: %d before the server, %d idle after warm-up, peak %d during %d calls, %d after", start, baseline, peak, calls, after)
	if after > baseline+slack {
		t.Errorf("goroutines did not wind down: %d idle before the load, %d a minute after %d calls", baseline, after, calls)
	}
	if chain.InFlight() != 0 {
		t.Errorf("%d runs still hold a slot after every call was answered", chain.InFlight())
	}

	// Tearing everything down returns to the level before the server.
	for _, cs := range sessions {
		_ = cs.Close()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = shutdown(sctx)
	ts.Close()
	if err := chain.Close(); err != nil {
		t.Errorf("closing the runner: %v", err)
	}
	final := settle(start + 2)
	t.Logf("goroutines after everything closed: %d (before the server: %d)", final, start)
	if final > start+2 {
		t.Errorf("goroutines left after everything closed: %d, %d before the server was made", final, start)
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
}
