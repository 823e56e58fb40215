package docker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/docker/image"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// recordedLog is a Runner's log, kept for the test to read (and shown with
// t.Log as it is written).
type recordedLog struct {
	t       testing.TB
	mu      sync.Mutex
	text    strings.Builder
	written chan struct{} // closed at the next write
}

// recordLog returns a logger whose lines the test can read.
func recordLog(t testing.TB) (*slog.Logger, *recordedLog) {
	l := &recordedLog{t: t, written: make(chan struct{})}
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})), l
}

func (l *recordedLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.text.Write(p)
	close(l.written)
	l.written = make(chan struct{})
	return len(p), nil
}

// String returns what was logged so far.
func (l *recordedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// await waits until a line holding every one of parts has been logged, or
// ctx ends; it reports whether one was.
func (l *recordedLog) await(ctx context.Context, parts ...string) bool {
	for {
		l.mu.Lock()
		text, written := l.text.String(), l.written
		l.mu.Unlock()
		for line := range strings.Lines(text) {
			if containsAll(line, parts...) {
				return true
			}
		}
		select {
		case <-written:
		case <-ctx.Done():
			return false
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestRunnerPullsItsImage: a sandbox image that names a registry and is
// not on the engine is pulled at start (here from a real registry on
// loopback), said loudly in the log, and runs code.
func TestRunnerPullsItsImage(t *testing.T) {
	cli := engine(t)
	reg := startRegistry(t, false)
	ref := reg.Ref("sandbox", "pulled")
	push(t, cli, testImage(), ref)
	if imagePresent(t, cli, ref) {
		t.Fatalf("%s is still on the engine after the push", ref)
	}
	t.Cleanup(func() { removeImage(t, cli, ref) })

	log, logged := recordLog(t)
	r, _ := newRunner(t, Config{Image: ref, Languages: []string{"python"}, Logger: log})
	res := run(t, r, sandboxtest.Req("python", "print(2**64)"))
	if res.ExitCode != 0 || res.Stdout != "18446744073709551616\n" {
		t.Fatalf("print(2**64) in the pulled image: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if !logged.await(ctx, "level=WARN", "pulled the sandbox image", ref, "registry="+reg.Addr) {
		t.Errorf("the log does not say loudly which image was pulled from where:\n%s", logged)
	}
}

// TestMissingImageSaysWhatToDo: a missing sandbox image that cannot be
// pulled or built, or that names no registry, stops New with one sentence
// that names the image, the registry or base and what the engine said (and
// a failed build's last lines), and gives the exact command for that image;
// nothing is left on the engine.
func TestMissingImageSaysWhatToDo(t *testing.T) {
	cli := engine(t)
	reg := startRegistry(t, false)
	locked := startRegistry(t, true)
	nowhere := sandboxtest.RefusingAddr(t)

	missing := reg.Ref("missing", "x")
	unreachable := nowhere + "/codeexec-test-" + newInstanceID() + "/sandbox:x"
	private := locked.Ref("sandbox", "x")
	local := "codeexec-test-" + newInstanceID() + ":x"
	// Images of codeexec's own, under names made up for the test: one whose
	// base cannot be pulled, one whose base is no Debian (a build step fails).
	own := "codeexec-test-" + newInstanceID() + ":own"
	baseNowhere := nowhere + "/codeexec-test-" + newInstanceID() + "/base:x"
	script := "from a checkout of codeexec (github.com/codeexec/codeexec): `docker/build-sandbox-image.sh --profile default --image " + own + "`"
	// The failed build leaves its first steps as intermediate images (the
	// engine's build cache, as after a failed docker build), which carry
	// the base's label: the cleanup removes them by it.
	label := "io.codeexec.test=" + newInstanceID()
	notDebian := buildTestImage(t, cli, "FROM scratch\nCOPY one /one\nLABEL "+label+"\n", map[string]string{"one": "not a shell\n"})
	t.Cleanup(func() { removeLabelled(t, cli, label) })
	cases := []struct {
		name, image string
		base        string // CODE_EXEC_DOCKER_BASE_IMAGE of a build
		want        []string
	}{
		{"the base of a build cannot be pulled", own, baseNowhere,
			[]string{"the sandbox image " + own + " is not on the Docker Engine", "and pulling the base image " + baseNowhere + " (CODE_EXEC_DOCKER_BASE_IMAGE) to build it on failed: the registry cannot be reached",
				"set CODE_EXEC_DOCKER_BASE_IMAGE to a Debian bookworm image the engine has", script}},
		{"a build step fails", own, notDebian,
			[]string{"the sandbox image " + own + " is not on the Docker Engine", "and building it (target default of the Dockerfile embedded in codeexec, on the base " + notDebian + ") failed:",
				script, "the build's last lines:\n    Step 1/", "\n    Step 4/9 : RUN set -eux;"}},
		{"a repository the registry lacks", missing, "",
			[]string{"the sandbox image " + missing + " is not on the Docker Engine", "and pulling it from the registry " + reg.Addr + " failed", "the registry has no such image", "not found", "`docker pull " + missing + "`"}},
		{"a registry where nothing listens", unreachable, "",
			[]string{"the sandbox image " + unreachable + " is not on the Docker Engine", "and pulling it from the registry " + nowhere + " failed", "the registry cannot be reached", "connection refused", "`docker pull " + unreachable + "`"}},
		{"a registry that wants credentials", private, "",
			[]string{"the sandbox image " + private + " is not on the Docker Engine", "and pulling it from the registry " + locked.Addr + " failed", "the registry refused it", "codeexec pulls without credentials", "`docker login " + locked.Addr + "`", "`docker pull " + private + "`"}},
		{"a name without a registry", local, "",
			[]string{"the sandbox image " + local + " is not on the Docker Engine", "names no registry", "`docker pull " + local + "`", "CODE_EXEC_DOCKER_IMAGE"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cfg := Config{Image: c.image, Languages: []string{"python"}, Logger: testLogger(t)}
			if c.base != "" {
				cfg.BaseImage, cfg.builds = c.base, map[string]string{c.image: image.TargetDefault}
			}
			r, err := New(ctx, cfg)
			if err == nil {
				_ = r.Close()
				t.Fatalf("New started with the missing image %s", c.image)
			}
			t.Logf("New: %v", err)
			if !errors.Is(err, sandbox.ErrSandboxUnavailable) {
				t.Errorf("the error does not wrap sandbox.ErrSandboxUnavailable: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			if c.base == "" && strings.Contains(err.Error(), "build-sandbox-image.sh") {
				t.Errorf("the error names codeexec's build script for an image that is not codeexec's own:\n%v", err)
			}
			if imagePresent(t, cli, c.image) {
				t.Errorf("%s is on the engine after a failed fetch", c.image)
			}
		})
	}
}

// TestPullFromRegistry: image.Pull brings an image the engine has never
// seen (its layers are random bytes) from a real registry on loopback, and
// logs the end of each layer.
func TestPullFromRegistry(t *testing.T) {
	cli := engine(t)
	reg := startRegistry(t, false)
	ref := pushRandomImage(t, cli, reg)

	log, logged := recordLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := image.Pull(ctx, cli, ref, log); err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if !imagePresent(t, cli, ref) {
		t.Fatalf("%s is not on the engine after Pull", ref)
	}
	if !logged.await(ctx, "pull: a layer is in", ref, "how=\"pull complete\"", "layers_done=\"2 of 2\"") {
		t.Errorf("the log does not say when the last layer was in:\n%s", logged)
	}
}

// pushRandomImage puts in reg an image of two layers of random bytes,
// which no engine has, and returns its reference; the engine does not have
// it either, and the test's end removes it from the engine.
func pushRandomImage(t *testing.T, cli *client.Client, reg *testRegistry) string {
	t.Helper()
	random := func() string {
		b := make([]byte, 2<<20)
		_, _ = rand.Read(b)
		return string(b)
	}
	local := buildTestImage(t, cli, "FROM scratch\nCOPY one /one\nCOPY two /two\n", map[string]string{"one": random(), "two": random()})
	ref := reg.Ref("layers", "x")
	push(t, cli, local, ref)
	removeImage(t, cli, local)
	if imagePresent(t, cli, local) || imagePresent(t, cli, ref) {
		t.Fatalf("the test image is still on the engine after its removal")
	}
	t.Cleanup(func() { removeImage(t, cli, ref) })
	return ref
}

// TestPullFailsMidway: a registry that serves an image's manifest but not
// one of its layers makes the pull fail midway, which the error says, and
// leaves no name on the engine.
func TestPullFailsMidway(t *testing.T) {
	cli := engine(t)
	reg := startRegistry(t, false)
	ref := pushRandomImage(t, cli, reg)
	// The layers are the registry's only blobs of about 2 MiB: remove one.
	var layers []string
	err := filepath.WalkDir(reg.Storage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && d.Name() == "data" && info.Size() > 1<<20 {
			layers = append(layers, p)
		}
		return nil
	})
	if err != nil || len(layers) != 2 {
		t.Fatalf("the registry's storage holds %d layers (%v), want 2", len(layers), err)
	}
	if err := os.Remove(layers[1]); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err = image.Pull(ctx, cli, ref, testLogger(t))
	t.Logf("Pull: %v", err)
	var pe *image.PullError
	if !errors.As(err, &pe) || pe.Reason != image.ReasonMidway || pe.Registry != reg.Addr || pe.Ref != ref {
		t.Fatalf("Pull of an image whose layer the registry lost: %v, want a *PullError from %s that says %q", err, reg.Addr, image.ReasonMidway)
	}
	if imagePresent(t, cli, ref) {
		t.Errorf("%s is on the engine after a failed pull", ref)
	}
}

// testBase makes a base image for a build that nothing else uses (a
// Debian bookworm image of the engine, with a label of the test's own),
// puts it in reg and removes it from the engine; it returns its reference
// in reg and the label that every image built on it carries, which the
// cleanup uses to remove them all.
func testBase(t *testing.T, cli *client.Client, reg *testRegistry) (ref, label string) {
	t.Helper()
	var debian string
	for _, img := range []string{"codeexec-debian-base:bookworm", image.DefaultBase} {
		if imagePresent(t, cli, img) {
			debian = img
			break
		}
	}
	if debian == "" {
		skipOrFail(t, "no Debian bookworm base on the engine to build on (codeexec-debian-base:bookworm, which docker/build-sandbox-image.sh makes, or %s)", image.DefaultBase)
	}
	label = "io.codeexec.test=" + newInstanceID()
	key, value, _ := strings.Cut(label, "=")
	local := buildTestImage(t, cli, fmt.Sprintf("FROM %s\nLABEL %s=%q\n", debian, key, value))
	ref = reg.Ref("base", "bookworm")
	push(t, cli, local, ref)
	removeImage(t, cli, local)
	t.Cleanup(func() { removeLabelled(t, cli, label) })
	return ref, label
}

// removeLabelled removes every image that carries label (and every name
// they have), children first.
func removeLabelled(t testing.TB, cli *client.Client, label string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for round := 0; ; round++ {
		list, err := cli.ImageList(ctx, client.ImageListOptions{All: true, Filters: make(client.Filters).Add("label", label)})
		if err != nil {
			t.Errorf("listing the test's images: %v", err)
			return
		}
		if len(list.Items) == 0 {
			return
		}
		if round == 10 {
			t.Errorf("%d images labelled %s are left on the engine", len(list.Items), label)
			return
		}
		for _, img := range list.Items {
			// An image with children fails until they are gone: the next
			// round takes it.
			_, _ = cli.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
	}
}

// TestBuildsItsOwnImage: a missing image of codeexec's own is built at
// start from the embedded Dockerfile (its stage default), on the base
// CODE_EXEC_DOCKER_BASE_IMAGE, which the engine lacks and pulls first from
// a real registry; the build's packages come from Debian's mirror, so it
// takes minutes. The Runner then runs code in it. The image's name is made
// up: the real codeexec-sandbox images are never touched.
func TestBuildsItsOwnImage(t *testing.T) {
	cli := engine(t)
	reg := startRegistry(t, false)
	base, _ := testBase(t, cli, reg)
	if imagePresent(t, cli, base) {
		t.Fatalf("the base %s is on the engine before the test", base)
	}
	tag := "codeexec-test-" + newInstanceID() + ":built"
	t.Cleanup(func() { removeImage(t, cli, tag) })

	log, logged := recordLog(t)
	r, _ := newRunnerWithin(t, Config{Image: tag, BaseImage: base, builds: map[string]string{tag: image.TargetDefault},
		Languages: []string{"python"}, Logger: log}, image.DefaultTimeout)
	res := run(t, r, sandboxtest.Req("python", "print(2**64)"))
	if res.ExitCode != 0 || res.Stdout != "18446744073709551616\n" {
		t.Fatalf("print(2**64) in the built image: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, want := range [][]string{
		{"level=WARN", "pulled the base image", "base=" + base, "registry=" + reg.Addr},
		{"build step", "image=" + tag, "RUN set -eux"},
		{"level=WARN", "built the sandbox image from the Dockerfile embedded in codeexec", "image=" + tag, "target=default", "base=" + base},
	} {
		if !logged.await(ctx, want...) {
			t.Errorf("no line of the log says %q:\n%s", want, logged)
		}
	}
}

// TestCancelledBuildLeavesNothing: a start cancelled while the build of its
// image runs a step leaves no container of the build and no image of that
// name on the engine.
func TestCancelledBuildLeavesNothing(t *testing.T) {
	cli := engine(t)
	reg := startRegistry(t, false)
	base, label := testBase(t, cli, reg)
	tag := "codeexec-test-" + newInstanceID() + ":cancelled"
	t.Cleanup(func() { removeImage(t, cli, tag) })
	// The build's containers are those made from images that carry the
	// base's label.
	buildContainers := func(ctx context.Context) []string { return labelledContainers(ctx, t, cli, label) }

	wait, stop := context.WithTimeout(context.Background(), 30*time.Minute)
	defer stop()
	events := cli.Events(wait, client.EventsListOptions{Since: strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10), Filters: make(client.Filters).Add("type", "container").Add("event", "start").Add("label", label)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		r, err := New(ctx, Config{Image: tag, BaseImage: base, builds: map[string]string{tag: image.TargetDefault}, Languages: []string{"python"}, Logger: testLogger(t)})
		if err == nil {
			_ = r.Close()
		}
		done <- err
	}()
	select {
	case <-events.Messages: // a step of the build runs in a container
	case err := <-events.Err:
		t.Fatalf("the engine's events: %v", err)
	case err := <-done:
		t.Fatalf("New ended before the build ran a step: %v", err)
	}
	cancel()
	err := <-done
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("New after its ctx was cancelled: %v, want an error wrapping context.Canceled", err)
	}
	f := make(client.Filters).Add("type", "container").Add("event", "destroy").Add("label", label)
	if left := awaitEngine(t, cli, f, 5*time.Minute, buildContainers); len(left) > 0 {
		t.Errorf("containers of the cancelled build are left on the engine: %v", left)
	}
	if imagePresent(t, cli, tag) {
		t.Errorf("%s is on the engine after a cancelled build", tag)
	}
}
