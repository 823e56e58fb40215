package runproto

import (
	"errors"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

func TestCheckLanguage(t *testing.T) {
	interps := map[string]sandbox.Interpreter{"python": {}}
	caps := sandbox.Capabilities{Languages: []sandbox.LanguageStatus{{Name: "bash", Reason: "no bash in the image"}}}
	for _, c := range []struct {
		name, language, want string
		is                   error
		msg                  string
	}{
		{"alias", "py", "python", nil, ""},
		{"unknown", "cobol", "", sandbox.ErrUnknownLanguage, "docker: "},
		{"disabled", "javascript", "", sandbox.ErrLanguageUnavailable, "disabled by CODE_EXEC_LANGUAGES"},
		{"not in the image", "bash", "", sandbox.ErrLanguageUnavailable, "bash cannot run in the image img: no bash in the image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := CheckLanguage("docker", c.language, []string{"python", "bash"}, interps, caps, "img")
			if got != c.want || !errors.Is(err, c.is) || (err != nil) != (c.is != nil) || (err != nil && !strings.Contains(err.Error(), c.msg)) {
				t.Fatalf("CheckLanguage(%q) = %q, %v; want %q, %v (%q)", c.language, got, err, c.want, c.is, c.msg)
			}
		})
	}
}

func TestCheckFiles(t *testing.T) {
	files := []artifacts.Input{{Path: "data.txt", Data: []byte("x")}}
	if art, err := CheckFiles("python", sandbox.Request{Files: files}); art != nil || err != nil {
		t.Fatalf("without artifacts: %+v, %v; want nil, nil", art, err)
	}
	art, err := CheckFiles("python", sandbox.Request{Files: files, Artifacts: &artifacts.Options{}})
	if err != nil || art == nil || art.Opts.Ignore == nil || !art.Opts.Ignore(sandbox.Languages["python"].FileName, false) || art.Opts.Ignore("data.txt", false) {
		t.Fatalf("with artifacts: %+v, %v; want the program's file ignored and the others not", art, err)
	}
	if _, err := CheckFiles("python", sandbox.Request{Files: []artifacts.Input{{Path: "main.py"}}, Artifacts: &artifacts.Options{}}); !errors.Is(err, artifacts.ErrInvalidFile) {
		t.Fatalf("a file in place of the program file: %v, want artifacts.ErrInvalidFile", err)
	}
}
