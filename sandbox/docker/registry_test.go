package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox/docker/image"
)

// testRegistry is a real registry (the distribution project's, Debian's
// docker-registry package) that a test starts on a free loopback port with
// a storage folder of its own, and stops at its end. Engines accept
// loopback registries without TLS.
type testRegistry struct {
	// Addr is where it listens, 127.0.0.1:PORT.
	Addr string
	// Storage is the folder of its filesystem storage.
	Storage string
}

// registryListening is the line the registry logs once it listens.
var registryListening = regexp.MustCompile(`listening on (127\.0\.0\.1:[0-9]+)`)

// startRegistry starts a registry for the test. With auth, it asks for
// credentials (htpasswd, with a user it makes up) and refuses anonymous
// pulls. Without the docker-registry command the test skips, or fails
// under CODE_EXEC_REQUIRE_DOCKER=1.
func startRegistry(t *testing.T, auth bool) *testRegistry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		skipOrFail(t, "no docker-registry command to serve a registry on loopback (apt-get install docker-registry; .ci/ensure-docker.sh installs it)")
	}
	dir := t.TempDir()
	storage := filepath.Join(dir, "data")
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: 127.0.0.1:0
`, storage)
	if auth {
		// A missing htpasswd file is made with a random user and password.
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: codeexec-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	var mu sync.Mutex
	var logged []string
	addr := make(chan string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			logged = append(logged, sc.Text())
			mu.Unlock()
			if m := registryListening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-drained
		_ = cmd.Wait()
	})
	select {
	case a := <-addr:
		return &testRegistry{Addr: a, Storage: storage}
	case <-drained:
	case <-time.After(time.Minute): // only keeps a broken registry from hanging the test
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("docker-registry did not say it listens; its log:\n%s", strings.Join(logged, "\n"))
	return nil
}

// Ref returns a reference to repo:tag on the registry, under a repository
// of a random name that the test owns.
func (g *testRegistry) Ref(repo, tag string) string {
	return g.Addr + "/codeexec-test-" + newInstanceID() + "/" + repo + ":" + tag
}

// push pushes the local image local to the registry as ref, then removes
// the tag ref from the engine (the image stays under its other names; an
// image of the test's own, tagged nowhere else, is gone).
func push(t *testing.T, cli *client.Client, local, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: local, Target: ref}); err != nil {
		t.Fatalf("tagging %s as %s: %v", local, ref, err)
	}
	defer removeImage(t, cli, ref)
	res, err := cli.ImagePush(ctx, ref, client.ImagePushOptions{RegistryAuth: base64.URLEncoding.EncodeToString([]byte("{}"))})
	if err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	if err := res.Wait(ctx); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

// removeImage removes the name ref from the engine, if it is there: the
// image itself goes when no other name holds it.
func removeImage(t testing.TB, cli *client.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("removing the test image %s: %v", ref, err)
	}
}

// imagePresent reports whether the engine has ref.
func imagePresent(t testing.TB, cli *client.Client, ref string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cli.ImageInspect(ctx, ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspecting %s: %v", ref, err)
	}
	return err == nil
}

// buildTestImage builds dockerfile, with files (name → content) as the
// rest of its build context, with the classic builder, tagged for this
// test, and removes it at the end.
func buildTestImage(t *testing.T, cli *client.Client, dockerfile string, files ...map[string]string) string {
	t.Helper()
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	add := func(name, content string) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(content))
	}
	add("Dockerfile", dockerfile)
	for _, fs := range files {
		for name, content := range fs {
			add(name, content)
		}
	}
	_ = tw.Close()
	tag := "codeexec-test-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + ":" + newInstanceID()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := image.BuildTar(ctx, cli, &ctxTar, client.ImageBuildOptions{Tags: []string{tag}}, log); err != nil {
		var be *image.BuildError
		if errors.As(err, &be) {
			t.Fatalf("building a test image: %v\n%s", err, strings.Join(be.Last, "\n"))
		}
		t.Fatalf("building a test image: %v", err)
	}
	t.Cleanup(func() { removeImage(t, cli, tag) })
	return tag
}
