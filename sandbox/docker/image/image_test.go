package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"codeexec-sandbox:latest":                  "",
		"codeexec-sandbox":                         "",
		"team/sandbox:1":                           "",
		"team/sub/sandbox:1":                       "",
		"debian@sha256:" + strings.Repeat("a", 64): "",
		"registry.example.com/team/sandbox:1":      "registry.example.com",
		"registry.example.com:5000/sandbox":        "registry.example.com:5000",
		"127.0.0.1:5000/codeexec/sandbox:x":        "127.0.0.1:5000",
		"localhost/sandbox:1":                      "localhost",
		"localhost:5000/sandbox:1":                 "localhost:5000",
		"docker.io/library/debian:bookworm-slim":   "docker.io",
		"[::1]:5000/sandbox:1":                     "[::1]:5000",
	}
	for ref, want := range cases {
		if got := Registry(ref); got != want {
			t.Errorf("Registry(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestTarget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ref     string
		targets map[string]string
		want    string // "" for none
	}{
		{"codeexec-sandbox:latest", nil, TargetDefault},
		{"codeexec-sandbox", nil, TargetDefault},
		{"codeexec-sandbox:datascience", nil, TargetDataScience},
		{"codeexec-sandbox:mine", nil, ""},
		{"docker.io/library/codeexec-sandbox:latest", nil, ""}, // names a registry: pulled
		{"localhost:5000/codeexec-sandbox:latest", nil, ""},
		{"team/codeexec-sandbox:latest", nil, ""},
		{"codeexec-sandbox@sha256:" + strings.Repeat("b", 64), nil, ""},
		{"Not A Reference", nil, ""},
		// Tests map names of their own, and the real ones are then not built.
		{"codeexec-test-1:built", map[string]string{"codeexec-test-1:built": TargetDefault}, TargetDefault},
		{"codeexec-sandbox:latest", map[string]string{"codeexec-test-1:built": TargetDefault}, ""},
	}
	for _, c := range cases {
		got, ok := Target(c.ref, c.targets)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("Target(%q, %v) = %q, %v; want %q", c.ref, c.targets, got, ok, c.want)
		}
	}
}

func TestPullReason(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err     error
		started bool
		want    string
	}{
		{errors.New(`Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`), false, ReasonUnreachable},
		{errors.New(`Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid: no such host`), false, ReasonUnreachable},
		{errors.New(`Get "https://r.example/v2/": x509: certificate signed by unknown authority`), false, ReasonUnreachable},
		{fmt.Errorf("manifest for r/x:1 not found: manifest unknown: %w", cerrdefs.ErrNotFound), false, ReasonNotFound},
		{errors.New(`Head "http://127.0.0.1:5/v2/x/manifests/y": no basic auth credentials`), false, ReasonRefused},
		{errors.New("pull access denied for x, repository does not exist or may require 'docker login': denied: requested access to the resource is denied"), false, ReasonRefused},
		{fmt.Errorf("denied: %w", cerrdefs.ErrUnauthenticated), false, ReasonRefused},
		{errors.New("unknown blob"), true, ReasonMidway},
		{errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by peer"), true, ReasonMidway},
		{errors.New("something else"), false, ReasonFailed},
	}
	for _, c := range cases {
		if got := pullReason(c.err, c.started); got != c.want {
			t.Errorf("pullReason(%q, started %v) = %q, want %q", c.err, c.started, got, c.want)
		}
	}
}

// logLines returns a logger that writes lines as docker mode's log does,
// and a function that returns them.
func logLines() (*slog.Logger, func() []string) {
	var buf strings.Builder
	return slog.New(slog.NewTextHandler(&buf, nil)), func() []string {
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}
}

// TestPullProgress: a pull logs the end of each layer, and how far it got
// every progressEvery, not at every message.
func TestPullProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log, lines := logLines()
		p := newPullProgress(log, "r.example/x:1")
		msg := func(status, id string, cur, total int64) jsonstream.Message {
			m := jsonstream.Message{Status: status, ID: id}
			if total > 0 {
				m.Progress = &jsonstream.Progress{Current: cur, Total: total}
			}
			return m
		}
		p.see(msg("Pulling from x", "1", 0, 0), time.Now())
		p.see(msg("Pulling fs layer", "aaa", 0, 0), time.Now())
		p.see(msg("Pulling fs layer", "bbb", 0, 0), time.Now())
		p.see(msg("Already exists", "ccc", 0, 0), time.Now())
		// 100 messages over 25 s: two progress lines (at 10 s and 20 s).
		for i := range 100 {
			time.Sleep(250 * time.Millisecond)
			p.see(msg("Downloading", "aaa", int64(i+1)<<20, 100<<20), time.Now())
		}
		p.see(msg("Download complete", "aaa", 0, 0), time.Now())
		p.see(msg("Pull complete", "aaa", 0, 0), time.Now())
		p.see(msg("Pull complete", "aaa", 0, 0), time.Now()) // said once
		p.see(msg("Digest: sha256:abc", "", 0, 0), time.Now())

		var progress, layers []string
		for _, l := range lines() {
			switch {
			case strings.Contains(l, `msg=pulling `):
				progress = append(progress, l)
			case strings.Contains(l, `msg="pull: a layer is in"`):
				layers = append(layers, l)
			default:
				t.Errorf("unexpected line %q", l)
			}
		}
		if len(progress) != 2 || !strings.Contains(progress[1], "downloaded=\"80.0 MiB of 100.0 MiB known so far\"") || !strings.Contains(progress[1], `layers_done="1 of 3"`) {
			t.Errorf("progress lines: %q, want two, the second at 80 MiB of 100 MiB with 1 of 3 layers in", progress)
		}
		if len(layers) != 2 || !strings.Contains(layers[0], "layer=ccc") || !strings.Contains(layers[0], `how="already exists"`) ||
			!strings.Contains(layers[1], "layer=aaa") || !strings.Contains(layers[1], `layers_done="2 of 3"`) {
			t.Errorf("layer lines: %q, want ccc then aaa", layers)
		}
	})
}

// TestBuildOutput: a build logs each step and, every progressEvery, the
// step it is at; lines split across chunks are joined; only the last
// lastLines are kept.
func TestBuildOutput(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log, lines := logLines()
		o := newBuildOutput(log)
		o.write("Step 1/3 : ARG BASE=debian:bookworm-slim\n", time.Now())
		o.write("Step 2/3 : FROM debian:book", time.Now())
		o.write("worm-slim\n ---> 5d7f7ab09832\n", time.Now())
		o.write("Step 3/3 : RUN apt-get update\n ---> Running in e18efe5f0151\n", time.Now())
		for i := range 40 {
			time.Sleep(time.Second)
			o.write(fmt.Sprintf("Get:%d http://deb.debian.org/debian bookworm/main\r", i), time.Now())
		}
		o.write("\x1b[91m+ groupadd --gid 10001 sandbox\n\x1b[0m", time.Now())
		o.write("Reading package lists...\nRemoving intermediate container e18efe5f0151\n ---> a98eaf6ea123", time.Now())
		o.flush()

		var steps, progress []string
		for _, l := range lines() {
			switch {
			case strings.Contains(l, `msg="build step"`):
				steps = append(steps, l)
			case strings.Contains(l, `msg=building `):
				progress = append(progress, l)
			default:
				t.Errorf("unexpected line %q", l)
			}
		}
		if len(steps) != 3 || !strings.Contains(steps[1], "step=\"Step 2/3 : FROM debian:bookworm-slim\"") {
			t.Errorf("steps: %q", steps)
		}
		if len(progress) != 4 || !strings.Contains(progress[3], "Step 3/3 : RUN apt-get update") || !strings.Contains(progress[3], "Get:39 ") {
			t.Errorf("progress lines: %q, want 4, at step 3 (the last after Get:39)", progress)
		}
		if len(o.last) != lastLines || o.last[lastLines-1] != "Reading package lists..." || o.last[lastLines-2] != "+ groupadd --gid 10001 sandbox" ||
			o.last[0] != "Get:30 http://deb.debian.org/debian bookworm/main" {
			t.Errorf("last lines: %q", o.last)
		}
	})
}

// TestNeverFetches: with PullNever a missing image is an error that says
// the command that gets it, for each kind of name, and nothing is asked of
// the engine.
func TestNeverFetches(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"registry.example.com/team/sandbox:1": "`docker pull registry.example.com/team/sandbox:1`",
		DataScienceImage:                      "from a checkout of codeexec (github.com/codeexec/codeexec): `docker/build-sandbox-image.sh --profile datascience --image codeexec-sandbox:datascience`",
		"codeexec-sandbox":                    "`docker/build-sandbox-image.sh --profile default --image codeexec-sandbox`",
		"team/sandbox:1":                      "`docker pull team/sandbox:1` (or write it docker.io/team/sandbox:1, which codeexec pulls)",
		"sha256:" + strings.Repeat("c", 64):   "it is an image id, which no registry serves",
	}
	for ref, want := range cases {
		f := Fetcher{Host: "unix:///var/run/docker.sock", Policy: PullNever} // no Engine: asking it would panic
		err := f.Fetch(context.Background(), ref)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "CODE_EXEC_DOCKER_PULL=never") ||
			!strings.HasPrefix(err.Error(), "the sandbox image "+ref+" is not on the Docker Engine at unix:///var/run/docker.sock") {
			t.Errorf("Fetch(%s) with PullNever: %v, want it to say %s", ref, err, want)
		}
	}
}
