package sandbox

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"runtime"
	"sort"
)

// runCoreSources are the Go files of the run core: the packages of this
// module that process mode's run helper (cmd/codeexec-sandbox, started
// for every run instead of the codeexec binary) links. A test keeps the
// list equal to what sandbox/process/early depends on.
//
//go:embed *.go internal/executor/*.go internal/procfs/*.go artifacts/*.go egress/*.go datascience/*.go process/early/*.go
var runCoreSources embed.FS

// RunCoreID identifies the run core's code in this binary: two binaries
// with the same ID run the same run core (the same sources, Go release and
// architecture). codeexec starts its run helper only when the helper says
// the same ID (see process.FindHelper); the modules they link are compared
// apart.
func RunCoreID() string {
	var names []string
	_ = fs.WalkDir(runCoreSources, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return nil
	})
	sort.Strings(names)
	h := sha256.New()
	h.Write([]byte(runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"))
	for _, n := range names {
		b, _ := runCoreSources.ReadFile(n)
		h.Write([]byte(n + "\x00"))
		sum := sha256.Sum256(b)
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}
