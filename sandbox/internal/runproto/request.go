package runproto

import (
	"fmt"
	"slices"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// CheckLanguage is the first check of a run in a mode whose runs go to an
// image (mode names it in errors: "docker", "kubernetes"): it returns the
// canonical name of language, which must be one of enabled
// (CODE_EXEC_LANGUAGES) that the image has (interps, as the probe found
// them; caps says why one is missing).
func CheckLanguage(mode, language string, enabled []string, interps map[string]sandbox.Interpreter, caps sandbox.Capabilities, image string) (string, error) {
	lang, err := sandbox.CanonicalLanguage(language)
	if err != nil {
		return "", fmt.Errorf("%s: %w", mode, err)
	}
	if !slices.Contains(enabled, lang) {
		return "", fmt.Errorf("%s: %w: %s is disabled by CODE_EXEC_LANGUAGES", mode, sandbox.ErrLanguageUnavailable, lang)
	}
	if _, ok := interps[lang]; !ok {
		st, _ := caps.Language(lang)
		return "", fmt.Errorf("%s: %w: %s cannot run in the image %s: %s", mode, sandbox.ErrLanguageUnavailable, lang, image, st.Reason)
	}
	return lang, nil
}

// Collect asks for the artifacts of a run (Streams.Collect): what its
// working directory held before the program ran (the files it was given)
// and the request's options.
type Collect struct {
	Before artifacts.Snapshot
	Opts   artifacts.Options
}

// CheckFiles checks the files of req, a run of lang, and returns what the
// run collects of its working directory: nil when it asked for no
// artifacts. The program's own file is never an artifact.
func CheckFiles(lang string, req sandbox.Request) (*Collect, error) {
	if err := sandbox.CheckFiles(lang, req.Files); err != nil {
		return nil, err
	}
	if req.Artifacts == nil {
		return nil, nil
	}
	opts := *req.Artifacts
	opts.Ignore = artifacts.IgnoreProgram(sandbox.Languages[lang].FileName, opts.Ignore)
	return &Collect{Before: artifacts.SnapshotOf(req.Files), Opts: opts}, nil
}
