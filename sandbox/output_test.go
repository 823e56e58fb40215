package sandbox_test

import (
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
)

// TestOutputObserve: the observer sees what is kept, stream by stream, in
// order, and nothing past the cap.
func TestOutputObserve(t *testing.T) {
	t.Parallel()
	type chunk struct {
		s sandbox.Stream
		p string
	}
	var seen []chunk
	limited := 0
	out := sandbox.NewOutput(10, func() { limited++ }).Observe(func(s sandbox.Stream, p []byte) {
		seen = append(seen, chunk{s, string(p)})
	})
	_, _ = out.Stdout().Write([]byte("abc\n"))
	_, _ = out.Stderr().Write([]byte("err\n"))
	_, _ = out.Stdout().Write([]byte("defgh"))
	_, _ = out.Stdout().Write([]byte("more"))
	want := []chunk{{sandbox.Stdout, "abc\n"}, {sandbox.Stderr, "err\n"}, {sandbox.Stdout, "de"}}
	if len(seen) != len(want) {
		t.Fatalf("observer saw %+v, want %+v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("chunk %d = %+v, want %+v", i, seen[i], want[i])
		}
	}
	var res sandbox.Result
	out.Fill(&res)
	if res.Stdout != "abc\nde" || res.Stderr != "err\n" || !res.Truncated || limited != 1 {
		t.Errorf("Fill = stdout %q stderr %q truncated %v (onLimit %d calls); the observer must change nothing",
			res.Stdout, res.Stderr, res.Truncated, limited)
	}
}

func TestOutputWithoutObserver(t *testing.T) {
	t.Parallel()
	out := sandbox.NewOutput(0, nil).Observe(nil)
	_, _ = out.Stdout().Write([]byte(strings.Repeat("x", 100)))
	var res sandbox.Result
	out.Fill(&res)
	if len(res.Stdout) != 100 || res.Truncated {
		t.Errorf("stdout %d bytes, truncated %v; want 100 bytes, not truncated", len(res.Stdout), res.Truncated)
	}
}
