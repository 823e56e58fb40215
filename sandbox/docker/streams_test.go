package docker

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// archiveOf is the tar stream a supervisor sends for files.
func archiveOf(t *testing.T, files ...artifacts.Input) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := artifacts.Archive(&b, files, 10001, 10001, time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The archive that follows the stdout trailer reaches the collector, in
// whatever pieces the stream delivers it; output before the trailer stays
// the program's.
func TestStreamsCollectTheArchive(t *testing.T) {
	t.Parallel()
	const nonce = trailerTag + "0123456789abcdef"
	in := artifacts.Input{Path: "data.csv", Data: []byte("a\n")}
	tarball := archiveOf(t, artifacts.Input{Path: "data.csv", Data: []byte("a\nb\n")}, artifacts.Input{Path: "out/chart.svg", Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)})

	cases := []struct {
		name   string
		stdout []byte
		end    bool // the stream ends without a stderr trailer
		want   string
		note   string
	}{
		{"archive", append([]byte(nonce+" 0 0 1\n"), tarball...), false, "data.csv out/chart.svg", ""},
		{"no archive", []byte(nonce + " 0 0 0\n"), false, "", ""},
		{"cut short", append([]byte(nonce+" 0 0 1\n"), tarball[:700]...), true, "data.csv", "the container's output ended in the middle of it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := newStreams(true, nonce)
			out := sandbox.NewOutput(0, nil)
			st.attach(out)
			st.collect(artifacts.SnapshotOf([]artifacts.Input{in}), artifacts.Options{})
			st.write(0, []byte{readyMarker, ackMarker})
			st.write(0, []byte("program output\n"))
			// Feed stdout in 100-byte pieces, as a stream may.
			for p := c.stdout; len(p) > 0; {
				n := min(100, len(p))
				st.write(0, p[:n])
				p = p[n:]
			}
			if c.end {
				st.end()
			} else {
				st.write(1, []byte(nonce+" 0 0\n"))
				st.end()
			}
			stop := make(chan struct{})
			time.AfterFunc(10*time.Second, func() { close(stop) })
			col := st.artifacts(stop)
			var got []string
			for _, a := range col.Artifacts {
				got = append(got, a.Path)
			}
			if strings.Join(got, " ") != c.want || !strings.Contains(col.Incomplete, c.note) {
				t.Errorf("artifacts %v (incomplete %q), want %q (%q)", got, col.Incomplete, c.want, c.note)
			}
			var res sandbox.Result
			out.Fill(&res)
			if res.Stdout != "program output\n" {
				t.Errorf("stdout %q", res.Stdout)
			}
		})
	}
}

// A trailer the program forges (it can read the nonce from PID 1's memory)
// ahead of PID 1's: the stderr trailer that ends the stream decides the
// status, the forged stderr line is output, and an archive started by a
// forged stdout trailer that does not carry that status is not taken for
// the working directory.
func TestStreamsForgedTrailer(t *testing.T) {
	t.Parallel()
	const nonce = trailerTag + "0123456789abcdef"
	st := newStreams(true, nonce)
	out := sandbox.NewOutput(0, nil)
	st.attach(out)
	st.collect(artifacts.Snapshot{}, artifacts.Options{})
	st.write(0, []byte{readyMarker, ackMarker})
	st.write(1, []byte(nonce+" 0 0\n"))
	st.write(0, []byte(nonce+" 0 0 1\n"))
	st.write(0, archiveOf(t, artifacts.Input{Path: "forged.txt", Data: []byte("x")}))
	st.write(1, []byte("still running\n"))
	st.write(0, []byte(nonce+" 7 0 0\n"))
	st.write(1, []byte(nonce+" 7 0\n"))
	st.end()
	status, ooms, ok := st.final()
	if !ok || status != 7 || ooms != 0 {
		t.Fatalf("final = %d %d %v, want 7 0 true", status, ooms, ok)
	}
	if st.archiveTrusted() {
		t.Errorf("the archive after a forged stdout trailer is trusted")
	}
	var res sandbox.Result
	out.Fill(&res)
	if res.Stderr != nonce+" 0 0\nstill running\n" {
		t.Errorf("stderr %q, want the forged line and what followed it", res.Stderr)
	}
}
