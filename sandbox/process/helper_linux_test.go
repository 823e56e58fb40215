package process

import (
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
)

// copyFile copies the file src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFindHelper: the run helper beside the binary is used only when it
// is a regular file that no one else may change, of the same build, and
// says the binary's run core; otherwise the reason is given. The test
// binary stands in for both (it answers RunCoreIDArg, see TestMain).
func TestFindHelper(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	exe, helper := filepath.Join(dir, "codeexec"), filepath.Join(dir, HelperName)
	copyFile(t, self, exe, 0o755)
	id := sandbox.RunCoreID()
	if path, why := findHelper(exe, id); path != "" || why != "" {
		t.Fatalf("without a helper: %q, %q; want neither", path, why)
	}

	copyFile(t, self, helper, 0o755)
	if path, why := findHelper(exe, id); path != helper || why != "" {
		t.Fatalf("the same build: %q, %q; want %s", path, why, helper)
	}
	link := filepath.Join(t.TempDir(), "codeexec")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	if path, why := findHelper(link, id); path != helper {
		t.Errorf("through a symbolic link to codeexec: %q, %q; want %s", path, why, helper)
	}

	for _, c := range []struct {
		name string
		set  func(t *testing.T)
		id   string
		want string
	}{
		{"another run core", nil, "0123456789abcdef", "has another run core than codeexec"},
		{"writable by its group", func(t *testing.T) { chmod(t, helper, 0o775) }, id, "may be changed by users other than its owner (mode -rwxrwxr-x)"},
		{"writable by others", func(t *testing.T) { chmod(t, helper, 0o757) }, id, "may be changed by users other than its owner"},
		{"not a program", func(t *testing.T) { write(t, helper, "#!/bin/sh\necho "+id+"\n") }, id, "reading the build of " + helper},
		{"a directory", func(t *testing.T) { mkdirAt(t, helper) }, id, "is not a regular file"},
		{"another user's", func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("only root can give the helper to another user")
			}
			if err := os.Chown(helper, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}, id, "belongs to uid 4242, neither root nor this server's user (uid 0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.RemoveAll(helper)
			copyFile(t, self, helper, 0o755)
			if c.set != nil {
				c.set(t)
			}
			path, why := findHelper(exe, c.id)
			if path != "" || !strings.Contains(why, c.want) {
				t.Errorf("findHelper = %q, %q; want no helper and a reason with %q", path, why, c.want)
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

func mkdirAt(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestSameBuild: a helper of another Go release, module, build setting or
// dependency version is not the same build; one whose settings outside the
// run core's (-ldflags) differ is.
func TestSameBuild(t *testing.T) {
	base := func() *debug.BuildInfo {
		return &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/codeexec/codeexec", Version: "(devel)"},
			Deps: []*debug.Module{
				{Path: "golang.org/x/sys", Version: "v0.49.0", Sum: "h1:a"},
				{Path: "github.com/landlock-lsm/go-landlock", Version: "v0.11.0", Sum: "h1:b"},
			},
			Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}, {Key: "CGO_ENABLED", Value: "1"}, {Key: "-ldflags", Value: "-X main.version=1"}},
		}
	}
	for _, c := range []struct {
		name   string
		change func(*debug.BuildInfo)
		want   string
	}{
		{"the same", func(*debug.BuildInfo) {}, ""},
		{"other -ldflags", func(b *debug.BuildInfo) { b.Settings[3].Value = "-s -w" }, ""},
		{"fewer modules", func(b *debug.BuildInfo) { b.Deps = b.Deps[:1] }, ""},
		{"another Go", func(b *debug.BuildInfo) { b.GoVersion = "go1.26.7" }, "was built with go1.26.7, codeexec with go1.26.8"},
		{"another module", func(b *debug.BuildInfo) { b.Main.Path = "example.com/fork" }, "comes from module example.com/fork"},
		{"another architecture", func(b *debug.BuildInfo) { b.Settings[1].Value = "arm64" }, `GOARCH="arm64", codeexec with "amd64"`},
		{"without cgo", func(b *debug.BuildInfo) { b.Settings[2].Value = "0" }, `CGO_ENABLED="0"`},
		{"build tags", func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-tags", Value: "landlocktsync"})
		}, `-tags="landlocktsync", codeexec with ""`},
		{"another version of a module", func(b *debug.BuildInfo) {
			b.Deps[1] = &debug.Module{Path: "github.com/landlock-lsm/go-landlock", Version: "v0.10.0", Sum: "h1:c"}
		}, "links github.com/landlock-lsm/go-landlock@v0.10.0 h1:c, codeexec github.com/landlock-lsm/go-landlock@v0.11.0 h1:b"},
		{"a module codeexec lacks", func(b *debug.BuildInfo) {
			b.Deps = append(b.Deps, &debug.Module{Path: "example.com/x", Version: "v1.0.0"})
		}, "links example.com/x@v1.0.0 , codeexec no such module"},
		{"a replaced module", func(b *debug.BuildInfo) {
			b.Deps[0] = &debug.Module{Path: "golang.org/x/sys", Version: "v0.49.0", Sum: "h1:a", Replace: &debug.Module{Path: "/src/sys", Version: "(devel)"}}
		}, "=> /src/sys@(devel)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			other := base()
			c.change(other)
			got := sameBuild(base(), other)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Errorf("sameBuild = %q, want %q", got, c.want)
			}
		})
	}
}
