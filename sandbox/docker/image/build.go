package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// lastLines is how many lines of a build's output a BuildError keeps.
const lastLines = 12

// BuildError is a failed build: what the engine said, and the last lines
// of the build's output.
type BuildError struct {
	Err  error
	Last []string
}

func (e *BuildError) Error() string { return e.Err.Error() }

func (e *BuildError) Unwrap() error { return e.Err }

// Build builds the stage target of the embedded Dockerfile, on the base
// image base (which should be on the engine: the build does not pull it),
// and tags the result tag, through the engine's build API (the classic
// builder, which every engine since API 1.41 has). It logs each step, and
// every few seconds the step it is at and its last line of output.
//
// The engine removes the build's intermediate containers whatever happens
// (a failed or cancelled build included), and sets tag only when the whole
// build succeeded; building the same tag twice at once is harmless (the
// later one's image keeps the tag). A failed build returns a *BuildError;
// when ctx ends first, the error wraps ctx.Err().
func Build(ctx context.Context, eng Engine, tag, target, base string, log *slog.Logger) error {
	tarball, err := BuildContext()
	if err != nil {
		return err
	}
	_, err = BuildTar(ctx, eng, bytes.NewReader(tarball), client.ImageBuildOptions{
		Tags:      []string{tag},
		Target:    target,
		BuildArgs: map[string]*string{"BASE": &base},
	}, log.With("image", tag))
	return err
}

// BuildTar runs one build of the build context in buildContext with opts,
// with the classic builder, removing its intermediate containers whatever
// happens, and returns the id of the image it made. It logs as Build
// does. A failed build returns a *BuildError; when ctx ends first, the
// error wraps ctx.Err().
func BuildTar(ctx context.Context, eng Engine, buildContext io.Reader, opts client.ImageBuildOptions, log *slog.Logger) (string, error) {
	opts.Version = build.BuilderV1
	opts.Remove, opts.ForceRemove = true, true
	res, err := eng.ImageBuild(ctx, buildContext, opts)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("the build stopped before it ended: %w", context.Cause(ctx))
		}
		return "", &BuildError{Err: err}
	}
	defer res.Body.Close()
	out := newBuildOutput(log)
	dec := json.NewDecoder(res.Body)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("the build stopped before it ended, at %s: %w", out.step, context.Cause(ctx))
			}
			return "", &BuildError{Err: fmt.Errorf("reading the build's output: %w", err), Last: out.last}
		}
		if m.Error != nil {
			out.flush()
			return "", &BuildError{Err: errors.New(strings.TrimSpace(m.Error.Message)), Last: out.last}
		}
		if m.Aux != nil {
			var aux struct{ ID string }
			if json.Unmarshal(*m.Aux, &aux) == nil && aux.ID != "" {
				out.id = aux.ID
			}
		}
		out.write(m.Stream, time.Now())
	}
	out.flush()
	if ctx.Err() != nil {
		return "", fmt.Errorf("the build stopped before it ended, at %s: %w", out.step, context.Cause(ctx))
	}
	if out.id == "" {
		return "", &BuildError{Err: errors.New("the engine ended the build without saying which image it made"), Last: out.last}
	}
	return out.id, nil
}

// buildOutput follows a build's output: it logs each step, and now and
// then the step it is at and its last line, and keeps the last lines.
type buildOutput struct {
	log     *slog.Logger
	partial string    // the start of a line not yet ended
	last    []string  // the last lines, at most lastLines
	step    string    // the current step ("Step 3/12 : RUN ...")
	next    time.Time // when to say how far it got next
	id      string    // the image it made, from the engine's aux message
}

func newBuildOutput(log *slog.Logger) *buildOutput {
	return &buildOutput{log: log, step: "its start"}
}

// write takes a chunk of the build's output, received at now.
func (o *buildOutput) write(s string, now time.Time) {
	if o.next.IsZero() {
		o.next = now.Add(progressEvery)
	}
	s = o.partial + strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(s, "\n")
	o.partial = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		o.line(l)
	}
	if !now.Before(o.next) {
		o.next = now.Add(progressEvery)
		last := ""
		if len(o.last) > 0 {
			last = o.last[len(o.last)-1]
		}
		o.log.Info("building", "step", o.step, "last_line", last)
	}
}

// flush takes a last line that did not end.
func (o *buildOutput) flush() {
	if o.partial != "" {
		o.line(o.partial)
		o.partial = ""
	}
}

func (o *buildOutput) line(l string) {
	l = strings.TrimSpace(terminalCodes.ReplaceAllString(l, ""))
	if l == "" {
		return
	}
	l = clip(l, 300)
	if strings.HasPrefix(l, "Step ") {
		o.step = clip(l, 120)
		o.log.Info("build step", "step", o.step)
	}
	if builderNotes.MatchString(l) {
		return // the builder's own bookkeeping, not the build's output
	}
	o.last = append(o.last, l)
	if len(o.last) > lastLines {
		o.last = o.last[len(o.last)-lastLines:]
	}
}

// terminalCodes are the terminal's escape sequences (colours) that the
// classic builder puts around a step's standard error.
var terminalCodes = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")

// builderNotes are the lines the classic builder adds between a build's
// own: an image committed, a step's container started and removed, a step
// taken from the cache.
var builderNotes = regexp.MustCompile(`^(---> [0-9a-f]{12,}$|---> Running in |---> Using cache$|Removing intermediate container )`)

// clip shortens s to at most n bytes (at a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
