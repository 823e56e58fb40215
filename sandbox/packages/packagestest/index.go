// Package packagestest serves package indexes for tests, on loopback: a
// PEP 503 simple index with wheels it builds itself and a minimal npm
// registry with tarballs it builds itself. Nothing leaves the machine.
package packagestest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// Package is one package version the index serves: Files maps paths inside
// the package (for python, inside the import package Name; for
// javascript, inside the npm package) to their contents.
type Package struct {
	Name    string
	Version string
	Files   map[string]string
	// TopLevel maps paths at the top of a python wheel, beside the import
	// package (sitecustomize.py, a .pth file, a module named like a
	// standard one), to their contents.
	TopLevel map[string]string
	// Stall makes the index never finish sending the package's wheel or
	// tarball (it waits until the client goes away): an install that runs
	// out of time.
	Stall bool
}

// Index is a running test index. Its URLs point at loopback.
type Index struct {
	// PipURL is the simple index (…/simple/); NpmURL the registry.
	PipURL string
	NpmURL string
	// Addr is the host:port it listens on.
	Addr string
	// Requests counts the requests it served; Downloads the wheels and
	// tarballs among them.
	Requests  atomic.Int64
	Downloads atomic.Int64

	stall    map[string]bool   // file names that never finish
	wheels   map[string][]byte // file name → wheel
	pyByName map[string][]Package
	tgz      map[string][]byte // name-version.tgz → tarball
	npm      map[string][]Package
}

// Serve starts an index on listen (for example "127.0.0.1:0") serving
// python and javascript packages; it stops when the test ends.
func Serve(t testing.TB, listen string, python, javascript []Package) *Index {
	t.Helper()
	ix := &Index{stall: map[string]bool{}, wheels: map[string][]byte{}, pyByName: map[string][]Package{}, tgz: map[string][]byte{}, npm: map[string][]Package{}}
	for _, p := range python {
		ix.wheels[WheelName(p)] = Wheel(t, p)
		ix.stall[WheelName(p)] = p.Stall
		ix.pyByName[normalize(p.Name)] = append(ix.pyByName[normalize(p.Name)], p)
	}
	for _, p := range javascript {
		ix.tgz[p.Name+"-"+p.Version+".tgz"] = Tarball(t, p)
		ix.stall[p.Name+"-"+p.Version+".tgz"] = p.Stall
		ix.npm[p.Name] = append(ix.npm[p.Name], p)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("test index: %v", err)
	}
	ix.Addr = l.Addr().String()
	ix.PipURL = "http://" + ix.Addr + "/simple/"
	ix.NpmURL = "http://" + ix.Addr + "/npm/"
	srv := &http.Server{Handler: http.HandlerFunc(ix.serve)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ix
}

func normalize(name string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name))
}

func (ix *Index) serve(w http.ResponseWriter, r *http.Request) {
	ix.Requests.Add(1)
	p := r.URL.Path
	switch {
	case p == "/simple/":
		var b strings.Builder
		b.WriteString("<!DOCTYPE html><html><body>\n")
		for name := range ix.pyByName {
			fmt.Fprintf(&b, "<a href=\"/simple/%s/\">%s</a>\n", name, name)
		}
		b.WriteString("</body></html>\n")
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(b.String()))
	case strings.HasPrefix(p, "/simple/"):
		name := normalize(strings.Trim(strings.TrimPrefix(p, "/simple/"), "/"))
		list, ok := ix.pyByName[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		var b strings.Builder
		b.WriteString("<!DOCTYPE html><html><body>\n")
		for _, pk := range list {
			f := WheelName(pk)
			sum := sha256.Sum256(ix.wheels[f])
			fmt.Fprintf(&b, "<a href=\"/files/%s#sha256=%s\">%s</a>\n", f, hex.EncodeToString(sum[:]), f)
		}
		b.WriteString("</body></html>\n")
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(b.String()))
	case strings.HasPrefix(p, "/files/"):
		f := strings.TrimPrefix(p, "/files/")
		ix.download(w, r, ix.wheels[f], ix.stall[f])
	case strings.HasPrefix(p, "/npm/-/"):
		f := strings.TrimPrefix(p, "/npm/-/")
		ix.download(w, r, ix.tgz[f], ix.stall[f])
	case strings.HasPrefix(p, "/npm/"):
		name := strings.TrimPrefix(p, "/npm/")
		name = strings.ReplaceAll(name, "%2f", "/")
		name = strings.ReplaceAll(name, "%2F", "/")
		list, ok := ix.npm[name]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"Not found"}`))
			return
		}
		versions := map[string]any{}
		latest := ""
		for _, pk := range list {
			tgz := ix.tgz[pk.Name+"-"+pk.Version+".tgz"]
			sha := sha1.Sum(tgz)
			sri := sha512SRI(tgz)
			versions[pk.Version] = map[string]any{
				"name": pk.Name, "version": pk.Version,
				"dist": map[string]any{
					"tarball":   "http://" + ix.Addr + "/npm/-/" + pk.Name + "-" + pk.Version + ".tgz",
					"shasum":    hex.EncodeToString(sha[:]),
					"integrity": sri,
				},
			}
			latest = pk.Version
		}
		doc := map[string]any{"name": name, "dist-tags": map[string]string{"latest": latest}, "versions": versions}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	default:
		http.NotFound(w, r)
	}
}

// download serves a wheel or a tarball (nil: not found) and counts it.
func (ix *Index) download(w http.ResponseWriter, r *http.Request, b []byte, stall bool) {
	if b == nil {
		http.NotFound(w, r)
		return
	}
	ix.Downloads.Add(1)
	w.Header().Set("Content-Type", "application/octet-stream")
	if stall {
		// Half of it, then nothing until the client gives up.
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		_, _ = w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	_, _ = w.Write(b)
}

// WheelName is the file name of p's wheel (pure python, any platform).
func WheelName(p Package) string {
	return strings.ReplaceAll(p.Name, "-", "_") + "-" + p.Version + "-py3-none-any.whl"
}

// Wheel builds p's wheel: the import package p.Name (dashes as
// underscores) with p.Files, p.TopLevel beside it, and its dist-info
// (METADATA, WHEEL, RECORD).
func Wheel(t testing.TB, p Package) []byte {
	t.Helper()
	mod := strings.ReplaceAll(p.Name, "-", "_")
	info := mod + "-" + p.Version + ".dist-info/"
	files := map[string]string{}
	for path, content := range p.Files {
		files[mod+"/"+path] = content
	}
	if _, ok := p.Files["__init__.py"]; !ok {
		files[mod+"/__init__.py"] = ""
	}
	for path, content := range p.TopLevel {
		files[path] = content
	}
	files[info+"METADATA"] = "Metadata-Version: 2.1\nName: " + p.Name + "\nVersion: " + p.Version + "\n"
	files[info+"WHEEL"] = "Wheel-Version: 1.0\nGenerator: codeexec-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	write := func(name, content string) {
		f, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte(content))
	}
	for name, content := range files {
		write(name, content)
		sum := sha256.Sum256([]byte(content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(content))
	}
	record.WriteString(info + "RECORD,,\n")
	write(info+"RECORD", record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Tarball builds p's npm tarball: package/package.json and p.Files under
// package/ (index.js by default module.exports = {}).
func Tarball(t testing.TB, p Package) []byte {
	t.Helper()
	files := map[string]string{"package.json": fmt.Sprintf(`{"name": %q, "version": %q, "main": "index.js"}`, p.Name, p.Version)}
	for path, content := range p.Files {
		files[path] = content
	}
	if _, ok := files["index.js"]; !ok {
		files["index.js"] = "module.exports = {};\n"
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(content))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// RequireInstallers skips t unless this host has what process mode's
// install phase runs: pip for /usr/bin/python3 and npm on the minimal PATH
// of runs. With CODE_EXEC_REQUIRE_INSTALLERS=1 (CI, after
// .ci/ensure-installers.sh) it fails instead. It skips under -short: real
// installs are slow.
func RequireInstallers(t testing.TB) {
	t.Helper()
	sandboxtest.SkipShort(t, sandboxtest.NeedsInstallers)
	var missing []string
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		missing = append(missing, "pip for /usr/bin/python3 ("+err.Error()+")")
	}
	npm := exec.Command("npm", "--version")
	npm.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if err := npm.Run(); err != nil {
		missing = append(missing, "npm on /usr/local/bin:/usr/bin:/bin ("+err.Error()+")")
	}
	if len(missing) == 0 {
		return
	}
	msg := "missing " + strings.Join(missing, ", ") + ": run .ci/ensure-installers.sh"
	if os.Getenv("CODE_EXEC_REQUIRE_INSTALLERS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
