package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// Policy says whether docker mode may fetch (pull or build) a sandbox
// image that the engine lacks (CODE_EXEC_DOCKER_PULL).
type Policy string

const (
	// PullMissing pulls a missing image that names a registry and builds a
	// missing image of codeexec's own; "" means PullMissing.
	PullMissing Policy = "missing"
	// PullNever fetches nothing: a missing image is an error that says the
	// command that gets it.
	PullNever Policy = "never"
)

// DefaultTimeout bounds a Fetch when Fetcher.Timeout is 0: a pull of the
// data-science image (1.3 GB) or its build on a slow host fits in it.
const DefaultTimeout = time.Hour

// checkout is where the build script lives, said so that nobody takes the
// path for one of their own machine.
const checkout = "from a checkout of codeexec (github.com/codeexec/codeexec)"

// Fetcher gets a missing sandbox image onto an engine.
type Fetcher struct {
	// Engine is the engine's client.
	Engine Engine
	// Host is the engine's address, for messages.
	Host string
	// Base is the base image of builds (CODE_EXEC_DOCKER_BASE_IMAGE); ""
	// means DefaultBase. It is pulled first when the engine lacks it.
	Base string
	// Policy is CODE_EXEC_DOCKER_PULL; "" means PullMissing.
	Policy Policy
	// Targets maps the images Fetch builds to their stage; nil means
	// Targets (tests name images of their own).
	Targets map[string]string
	// Timeout bounds a Fetch; 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives the progress and, as warnings, which image was pulled
	// or built from what; nil discards them.
	Logger *slog.Logger
}

// Fetch gets ref, which the engine lacks: it pulls ref when ref names a
// registry (see Registry), and builds it (see Build) when it is an image of
// Targets, pulling the base first when the engine lacks it. Otherwise, or
// when that fails, or when Policy is PullNever, it returns an error: one
// sentence that names the image, where it was to come from and what went
// wrong, and says the exact command that gets it (and, after a failed
// build, the build's last lines of output).
//
// A Fetch that fails or whose ctx ends leaves no name behind on the engine
// (a pulled base stays: it is whole).
func (f *Fetcher) Fetch(ctx context.Context, ref string) error {
	log := f.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := cmp.Or(f.Timeout, DefaultTimeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("codeexec gives fetching a sandbox image %v", timeout))
	defer cancel()
	missing := fmt.Sprintf("the sandbox image %s is not on the Docker Engine at %s", ref, f.Host)
	registry := Registry(ref)
	target, ours := Target(ref, f.Targets)
	if f.Policy == PullNever {
		return fmt.Errorf("%s, and CODE_EXEC_DOCKER_PULL=never: codeexec neither pulls nor builds it; %s", missing, howTo(ref, registry, target, ours))
	}
	switch {
	case registry != "":
		log.Warn("the sandbox image is not on the engine: pulling it from its registry", "image", ref, "registry", registry)
		if err := Pull(ctx, f.Engine, ref, log); err != nil {
			return fmt.Errorf("%s, and pulling it from the registry %s failed: %w; %s", missing, registry, pullProblem(err), pullAdvice(ref, registry, err))
		}
		log.Warn("pulled the sandbox image from its registry", "image", ref, "registry", registry, "id", f.id(ctx, ref))
		return nil
	case ours:
		return f.build(ctx, log, ref, target, missing)
	}
	if imageID.MatchString(ref) {
		return fmt.Errorf("%s; %s", missing, howTo(ref, registry, target, ours))
	}
	return fmt.Errorf("%s, and its name names no registry, so codeexec does not pull it (it pulls names that begin with one, such as registry.example.com/team/sandbox:1, and builds only %s and %s): %s",
		missing, DefaultImage, DataScienceImage, howTo(ref, registry, target, ours))
}

// build builds ref from target of the embedded Dockerfile, after pulling
// the base when the engine lacks it.
func (f *Fetcher) build(ctx context.Context, log *slog.Logger, ref, target, missing string) error {
	base := cmp.Or(f.Base, DefaultBase)
	script := fmt.Sprintf("%s: `docker/build-sandbox-image.sh --profile %s --image %s`, which bootstraps a Debian base from Debian's mirror when none can be pulled", checkout, target, ref)
	if _, err := f.Engine.ImageInspect(ctx, base); cerrdefs.IsNotFound(err) {
		log.Warn("the sandbox image is not on the engine: pulling the base image to build it on", "image", ref, "base", base, "registry", pullRegistry(base))
		if err := Pull(ctx, f.Engine, base, log); err != nil {
			return fmt.Errorf("%s, and pulling the base image %s (CODE_EXEC_DOCKER_BASE_IMAGE) to build it on failed: %w; set CODE_EXEC_DOCKER_BASE_IMAGE to a Debian bookworm image the engine has, or build %s %s",
				missing, base, pullProblem(err), ref, script)
		}
		log.Warn("pulled the base image", "base", base, "registry", pullRegistry(base), "id", f.id(ctx, base))
	} else if err != nil {
		return fmt.Errorf("%s, and inspecting the base image %s (CODE_EXEC_DOCKER_BASE_IMAGE) failed: %v", missing, base, err)
	}
	log.Warn("the sandbox image is not on the engine: building it from the Dockerfile embedded in codeexec (apt-get fetches its packages from Debian's mirror; this takes minutes)",
		"image", ref, "target", target, "base", base, "base_id", f.id(ctx, base))
	if err := Build(ctx, f.Engine, ref, target, base, log); err != nil {
		last := ""
		var be *BuildError
		if errors.As(err, &be) && len(be.Last) > 0 {
			last = "; the build's last lines:\n    " + strings.Join(be.Last, "\n    ")
		}
		return fmt.Errorf("%s, and building it (target %s of the Dockerfile embedded in codeexec, on the base %s) failed: %w; build it %s, or set CODE_EXEC_DOCKER_BASE_IMAGE to another Debian bookworm image the engine has%s",
			missing, target, base, oneLine(err), script, last)
	}
	log.Warn("built the sandbox image from the Dockerfile embedded in codeexec", "image", ref, "target", target, "base", base, "id", f.id(ctx, ref))
	return nil
}

// id returns the engine's id of ref, for the log ("" when it cannot say).
func (f *Fetcher) id(ctx context.Context, ref string) string {
	img, err := f.Engine.ImageInspect(ctx, ref)
	if err != nil {
		return ""
	}
	return img.ID
}

// howTo says the exact command that gets ref onto the engine by hand.
func howTo(ref, registry, target string, ours bool) string {
	switch {
	case registry != "":
		return fmt.Sprintf("pull it into that engine with `docker pull %s`, or set CODE_EXEC_DOCKER_IMAGE to an image the engine has", ref)
	case ours:
		return fmt.Sprintf("build it %s: `docker/build-sandbox-image.sh --profile %s --image %s`, or set CODE_EXEC_DOCKER_IMAGE to an image the engine has", checkout, target, ref)
	}
	if imageID.MatchString(ref) {
		return "it is an image id, which no registry serves: build or load that image on the engine (`docker load`), or set CODE_EXEC_DOCKER_IMAGE to a name (registry.example.com/team/sandbox@sha256:... pins a digest)"
	}
	return fmt.Sprintf("if it is on Docker Hub, pull it into that engine with `docker pull %s` (or write it docker.io/%s, which codeexec pulls); otherwise build or load it on that engine (`docker build -t %s ...`, `docker load`), or set CODE_EXEC_DOCKER_IMAGE to an image the engine has",
		ref, dockerHubName(ref), ref)
}

// imageID matches an engine's image id, whole or short.
var imageID = regexp.MustCompile(`^(sha256:[0-9a-f]{64}|[0-9a-f]{12,64})$`)

// dockerHubName is ref as Docker Hub knows it (library/ for an official
// image), without the registry.
func dockerHubName(ref string) string {
	if !strings.Contains(ref, "/") {
		return "library/" + ref
	}
	return ref
}

// pullProblem says what went wrong with a pull, with the engine's words,
// on one line; it wraps err.
func pullProblem(err error) error {
	var pe *PullError
	if errors.As(err, &pe) {
		said := strings.TrimPrefix(strings.Join(strings.Fields(pe.Err.Error()), " "), "Error response from daemon: ")
		return &line{fmt.Sprintf("%s (the engine said: %s)", pe.Reason, said), err}
	}
	return oneLine(err)
}

// pullAdvice says what to do after a failed pull of ref.
func pullAdvice(ref, registry string, err error) string {
	var pe *PullError
	if errors.As(err, &pe) && pe.Reason == ReasonRefused {
		return fmt.Sprintf("codeexec pulls without credentials: on the engine's host, log in with `docker login %s`, then `docker pull %s`, or set CODE_EXEC_DOCKER_IMAGE to an image the engine has", registry, ref)
	}
	return howTo(ref, registry, "", false)
}

// oneLine returns err with its text on one line.
func oneLine(err error) error {
	return &line{strings.Join(strings.Fields(err.Error()), " "), err}
}

// line is an error with other words than the error it wraps.
type line struct {
	text string
	err  error
}

func (l *line) Error() string { return l.text }

func (l *line) Unwrap() error { return l.err }
