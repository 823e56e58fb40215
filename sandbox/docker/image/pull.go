package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// Engine is what this package needs of a Docker Engine client
// (*client.Client has it).
type Engine interface {
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImagePull(ctx context.Context, ref string, opts client.ImagePullOptions) (client.ImagePullResponse, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, opts client.ImageBuildOptions) (client.ImageBuildResult, error)
}

var _ Engine = (*client.Client)(nil)

// progressEvery is how often a pull or a build says how far it got, besides
// the end of each layer (a pull) or step (a build).
const progressEvery = 10 * time.Second

// What went wrong with a pull, as PullError.Reason says it.
const (
	ReasonUnreachable = "the registry cannot be reached"
	ReasonRefused     = "the registry refused it"
	ReasonNotFound    = "the registry has no such image"
	ReasonMidway      = "the pull failed midway"
	ReasonFailed      = "the pull failed"
)

// PullError is a failed pull: of which image, from which registry, why in
// a few words (one of the Reason constants), and what the engine said.
type PullError struct {
	Ref, Registry, Reason string
	Err                   error
}

func (e *PullError) Error() string {
	return fmt.Sprintf("pulling %s from the registry %s failed: %s (the engine said: %v)", e.Ref, e.Registry, e.Reason, e.Err)
}

func (e *PullError) Unwrap() error { return e.Err }

// Pull pulls ref onto the engine, without credentials (an anonymous pull,
// as `docker pull` without `docker login`), and logs how far it got every
// few seconds and at the end of each layer. A failed pull returns a
// *PullError; when ctx ends first, the error wraps ctx.Err(). The engine
// tags ref only once every layer is there, so a pull that fails or is
// cancelled leaves no name behind.
func Pull(ctx context.Context, eng Engine, ref string, log *slog.Logger) error {
	registry := pullRegistry(ref)
	fail := func(err error, started bool) error {
		if ctx.Err() != nil {
			return fmt.Errorf("pulling %s from the registry %s stopped before it ended: %w", ref, registry, context.Cause(ctx))
		}
		return &PullError{Ref: ref, Registry: registry, Reason: pullReason(err, started), Err: err}
	}
	res, err := eng.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return fail(err, false)
	}
	defer res.Close()
	p := newPullProgress(log, ref)
	for m, err := range res.JSONMessages(ctx) {
		if err != nil {
			return fail(err, p.started())
		}
		if m.Error != nil {
			return fail(errors.New(m.Error.Message), p.started())
		}
		p.see(m, time.Now())
	}
	if ctx.Err() != nil {
		return fail(ctx.Err(), p.started())
	}
	return nil
}

// pullReason says in a few words why a pull failed, from what the engine
// said (its error kind where it gives one, otherwise its words), and
// whether layers had started to come.
func pullReason(err error, started bool) string {
	msg := strings.ToLower(err.Error())
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(msg, w) {
				return true
			}
		}
		return false
	}
	switch {
	case cerrdefs.IsUnauthorized(err) || cerrdefs.IsPermissionDenied(err) ||
		has("unauthorized", "authentication required", "no basic auth credentials", "access denied", "denied:", "forbidden"):
		return ReasonRefused
	case started:
		return ReasonMidway
	case has("connection refused", "no such host", "i/o timeout", "network is unreachable", "no route to host",
		"server misbehaving", "tls:", "x509:", "http response to https client", "dial tcp", "connection reset"):
		return ReasonUnreachable
	case cerrdefs.IsNotFound(err) || has("manifest unknown", "not found", "name unknown"):
		return ReasonNotFound
	}
	return ReasonFailed
}

// pullProgress follows a pull's messages and logs how far it got.
type pullProgress struct {
	log    *slog.Logger
	ref    string
	next   time.Time // when to say how far it got next
	layers map[string]*layerProgress
}

type layerProgress struct {
	downloaded, size int64
	done             bool
}

func newPullProgress(log *slog.Logger, ref string) *pullProgress {
	return &pullProgress{log: log, ref: ref, layers: map[string]*layerProgress{}}
}

// started reports whether any layer began to come (or was found there).
func (p *pullProgress) started() bool { return len(p.layers) > 0 }

// see takes one message of the pull, received at now.
func (p *pullProgress) see(m jsonstream.Message, now time.Time) {
	if p.next.IsZero() {
		p.next = now.Add(progressEvery)
	}
	switch m.Status {
	case "Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete", "Extracting", "Pull complete", "Already exists":
	default:
		return // "Pulling from ...", "Digest: ...", "Status: ...": not a layer's
	}
	l := p.layers[m.ID]
	if l == nil {
		l = &layerProgress{}
		p.layers[m.ID] = l
	}
	switch m.Status {
	case "Downloading":
		if m.Progress != nil {
			l.downloaded, l.size = m.Progress.Current, max(l.size, m.Progress.Total)
		}
	case "Download complete", "Verifying Checksum":
		l.downloaded = l.size
	case "Pull complete", "Already exists":
		if !l.done {
			l.done = true
			l.downloaded = l.size
			done, all := p.count()
			p.log.Info("pull: a layer is in", "image", p.ref, "layer", m.ID, "how", strings.ToLower(m.Status), "layers_done", fmt.Sprintf("%d of %d", done, all))
		}
	}
	if !now.Before(p.next) {
		p.next = now.Add(progressEvery)
		done, all := p.count()
		var got, size int64
		for _, l := range p.layers {
			got += l.downloaded
			size += l.size
		}
		p.log.Info("pulling", "image", p.ref, "downloaded", artifacts.FormatBytes(got)+" of "+artifacts.FormatBytes(size)+" known so far", "layers_done", fmt.Sprintf("%d of %d", done, all))
	}
}

// count returns how many layers are in, of how many the pull has named.
func (p *pullProgress) count() (done, all int) {
	for _, l := range p.layers {
		if l.done {
			done++
		}
	}
	return done, len(p.layers)
}
