package process

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/internal/executor"
	"github.com/codeexec/codeexec/sandbox/process/seatbelt"
)

// The profile of a run holds what the run is given, each as the runner
// says: the run directory and writable binds writable, the workspace and
// the interpreters read-only, the proxy's port reachable; the rest of the
// home folder refused. (The profile's rules themselves are tested in
// sandbox/process/seatbelt; this is what the runner feeds them.)
func TestSeatbeltProfileOfARun(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Seatbelt profiles hold macOS paths, which Windows' are not")
	}
	home := t.TempDir()
	mk := func(p string) string {
		p = filepath.Join(home, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return realPath(p)
	}
	python := mk(".pyenv/versions/3.12.4/bin")
	node := mk(".nvm/versions/node/v22.1.0/bin")
	tool := mk("tools")
	for _, f := range []string{python + "/python3.12", node + "/node", tool + "/bash"} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	roots := interpreterRoots(map[string]sandbox.Interpreter{
		"python": {Path: python + "/python3.12"}, "javascript": {Path: node + "/node"}, "bash": {Path: tool + "/bash"},
		"system": {Path: "/usr/bin/true"},
	})
	want := []string{filepath.Dir(node), filepath.Dir(python), tool}
	if strings.Join(roots, " ") != strings.Join(want, " ") {
		t.Fatalf("interpreter roots %q, want %q", roots, want)
	}
	run, ws, pkgs, ctl := mk("work/run-1"), mk("project"), mk("work/packages"), mk("work/ctl")
	// The run directory as the runner names it: through a link, as
	// /var/folders is /private/var/folders on a Mac.
	link := filepath.Join(home, "link")
	if err := os.Symlink(filepath.Dir(run), link); err != nil {
		t.Fatal(err)
	}
	iso := executor.Isolation{Binds: []executor.Bind{{Src: ws, Dst: sandbox.WorkspacePath}, {Src: pkgs, Dst: sandbox.PackagesPath, Writable: true}, {Src: ctl, Dst: ctl, Writable: true}}}
	sb := &seatbeltRuns{readOnly: roots}
	src, err := sb.profile(iso, filepath.Join(link, "run-1"), 41234)
	if err != nil {
		t.Fatal(err)
	}
	p, err := seatbelt.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	check := func(q seatbelt.Query, want seatbelt.Decision) {
		t.Helper()
		if got := p.Evaluate(q); got != want {
			t.Errorf("%+v: %v, want %v", q, got, want)
		}
	}
	check(seatbelt.Query{Op: "file-write-create", Path: run + "/out.txt"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-write-create", Path: pkgs + "/lib/x.py"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-write-data", Path: ctl + "/in-abc"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-read-data", Path: ws + "/README"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-write-data", Path: ws + "/README"}, seatbelt.Denied)
	check(seatbelt.Query{Op: "process-exec", Path: python + "/python3.12"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-read-data", Path: filepath.Dir(python) + "/lib/python3.12/os.py"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-read-data", Path: home + "/.ssh/id_ed25519"}, seatbelt.Denied)
	check(seatbelt.Query{Op: "file-read-data", Path: filepath.Dir(run) + "/run-2/main.py"}, seatbelt.Denied)
	check(seatbelt.Query{Op: "network-outbound", Remote: "127.0.0.1:41234"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "network-outbound", Remote: "127.0.0.1:41235"}, seatbelt.Denied)

	// CODE_EXEC_PROCESS_DISABLE=network opens the network, and only it.
	sb.network = true
	if src, err = sb.profile(iso, run, 0); err != nil {
		t.Fatal(err)
	}
	if p, err = seatbelt.Parse(src); err != nil {
		t.Fatal(err)
	}
	check(seatbelt.Query{Op: "network-outbound", Remote: "93.184.216.34:443"}, seatbelt.Allowed)
	check(seatbelt.Query{Op: "file-read-data", Path: home + "/.ssh/id_ed25519"}, seatbelt.Denied)
}

// The start-up probe counts Seatbelt as active only when the program
// under it did what a run may and was refused the rest: run outside any
// sandbox (as here, on a system without Seatbelt), the probe helper reads
// and connects freely, and the check says so.
func TestSeatbeltProbeRefusesAnUnconfinedRun(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	probe := executor.SeatbeltProbe{
		ReadRun: filepath.Join(dir, "in.txt"), WriteRun: filepath.Join(dir, "out.txt"),
		ReadOutside: filepath.Join(outside, "secret.txt"), WriteOutside: filepath.Join(outside, "planted.txt"),
		Home: outside, Connect: listenLoopback(t),
	}
	for _, f := range []string{probe.ReadRun, probe.ReadOutside} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report := probe.Run()
	err := checkSeatbeltProbe(report, false)
	if err == nil {
		t.Fatalf("an unconfined run passed the probe: %v", report)
	}
	for _, check := range []string{executor.ProbeReadOutside, executor.ProbeListHome, executor.ProbeWriteOutside, executor.ProbeConnect} {
		if !strings.Contains(err.Error(), check+": done (want refused)") {
			t.Errorf("the probe's verdict does not name %q: %v", check, err)
		}
	}
	if strings.Contains(err.Error(), executor.ProbeReadRun) || strings.Contains(err.Error(), executor.ProbeWriteRun) {
		t.Errorf("the run directory was not read or written: %v", err)
	}
}

func TestCheckSeatbeltProbe(t *testing.T) {
	good := map[string]string{}
	for k, v := range seatbeltProbeWant {
		good[k] = v
	}
	if err := checkSeatbeltProbe(good, false); err != nil {
		t.Fatalf("a confined run failed the probe: %v", err)
	}
	// A file that is missing proves nothing: only a refusal counts.
	bad := map[string]string{}
	for k, v := range good {
		bad[k] = v
	}
	bad[executor.ProbeReadOutside] = "failed: no such file or directory"
	delete(bad, executor.ProbeConnect)
	err := checkSeatbeltProbe(bad, false)
	if err == nil || !strings.Contains(err.Error(), "failed: no such file") || !strings.Contains(err.Error(), executor.ProbeConnect+": not tried") {
		t.Fatalf("%v", err)
	}
	// With the network allowed, the connection is not checked.
	bad[executor.ProbeReadOutside] = executor.ProbeRefused
	bad[executor.ProbeConnect] = executor.ProbeOK
	if err := checkSeatbeltProbe(bad, true); err != nil {
		t.Fatalf("with the network allowed: %v", err)
	}
}

// listenLoopback listens on a loopback port, accepting and closing every
// connection until the test ends, and returns its address.
func listenLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go discardConnections(ln)
	return ln.Addr().String()
}
