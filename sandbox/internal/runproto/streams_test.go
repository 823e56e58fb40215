package runproto

import (
	"bytes"
	"slices"
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
	const nonce = TrailerTag + "0123456789abcdef"
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
			st := NewStreams(true, nonce)
			out := sandbox.NewOutput(0, nil)
			st.Attach(out)
			st.Collect(artifacts.SnapshotOf([]artifacts.Input{in}), artifacts.Options{})
			st.write(0, []byte{ReadyMarker, AckMarker})
			st.write(0, []byte("program output\n"))
			// Feed stdout in 100-byte pieces, as a stream may.
			for p := c.stdout; len(p) > 0; {
				n := min(100, len(p))
				st.write(0, p[:n])
				p = p[n:]
			}
			if c.end {
				st.End()
			} else {
				st.write(1, []byte(nonce+" 0 0\n"))
				st.End()
			}
			stop := make(chan struct{})
			time.AfterFunc(10*time.Second, func() { close(stop) })
			col := st.Artifacts(stop)
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
	const nonce = TrailerTag + "0123456789abcdef"
	st := NewStreams(true, nonce)
	out := sandbox.NewOutput(0, nil)
	st.Attach(out)
	st.Collect(artifacts.Snapshot{}, artifacts.Options{})
	st.write(0, []byte{ReadyMarker, AckMarker})
	st.write(1, []byte(nonce+" 0 0\n"))
	st.write(0, []byte(nonce+" 0 0 1\n"))
	st.write(0, archiveOf(t, artifacts.Input{Path: "forged.txt", Data: []byte("x")}))
	st.write(1, []byte("still running\n"))
	st.write(0, []byte(nonce+" 7 0 0\n"))
	st.write(1, []byte(nonce+" 7 0\n"))
	st.End()
	status, ooms, ok := st.Final()
	if !ok || status != 7 || ooms != 0 {
		t.Fatalf("Final = %d %d %v, want 7 0 true", status, ooms, ok)
	}
	if st.ArchiveTrusted() {
		t.Errorf("the archive after a forged stdout trailer is trusted")
	}
	var res sandbox.Result
	out.Fill(&res)
	if res.Stderr != nonce+" 0 0\nstill running\n" {
		t.Errorf("stderr %q, want the forged line and what followed it", res.Stderr)
	}
}

func TestTrailerScanner(t *testing.T) {
	const nonce = TrailerTag + "0123456789abcdef"
	cases := []struct {
		name   string
		chunks []string
		out    string
		line   string
	}{
		{"whole", []string{"hello\n" + nonce + " 3 0\nleftover"}, "hello\n", "3 0"},
		{"split everywhere", strings.Split("ab"+nonce+" 0 -\n", ""), "ab", "0 -"},
		{"no newline before", []string{"partial", nonce[:5], nonce[5:] + " 1 0", "\n"}, "partial", "1 0"},
		{"look-alike", []string{TrailerTag + "x " + nonce + " 0 0\n"}, TrailerTag + "x ", "0 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := trailerScanner{needle: []byte(nonce + " ")}
			var out strings.Builder
			var line string
			var found bool
			for _, ch := range c.chunks {
				if l, _, ok := sc.feed([]byte(ch), func(b []byte) { out.Write(b) }); ok {
					line, found = l, true
				}
			}
			if !found || line != c.line || out.String() != c.out {
				t.Fatalf("out %q line %q found %v; want out %q line %q", out.String(), line, found, c.out, c.line)
			}
		})
	}
	t.Run("output is not held back", func(t *testing.T) {
		// Only a tail that could start the trailer waits for more.
		sc := trailerScanner{needle: []byte(nonce + " ")}
		var out strings.Builder
		sc.feed([]byte("one\n"), func(b []byte) { out.Write(b) })
		if out.String() != "one\n" {
			t.Fatalf("after a line, passed on %q, want it all", out.String())
		}
		sc.feed([]byte("two"+nonce[:4]), func(b []byte) { out.Write(b) })
		if out.String() != "one\ntwo" {
			t.Fatalf("passed on %q, want all but the tail that starts the trailer", out.String())
		}
	})
	// On stderr (last) a trailer counts only as the stream's last line: one
	// the program forges and follows with more output is output again, and
	// one that is cut short is output too.
	for _, c := range []struct {
		name   string
		chunks []string
		out    string
		line   string // "" when no trailer is held at the end
	}{
		{"held at the end", []string{"err\n", nonce + " 3 0\n"}, "err\n", "3 0"},
		{"forged, then more", []string{nonce + " 0 0\nmore\n", nonce + " 3 0\n"}, nonce + " 0 0\nmore\n", "3 0"},
		{"forged, then more in the same piece", []string{nonce + " 0 0\nx" + nonce + " 9 0\n"}, nonce + " 0 0\nx", "9 0"},
		{"forged, then the stream ends mid-line", []string{nonce + " 0 0\n", "sleeping"}, nonce + " 0 0\nsleeping", ""},
		{"cut short", []string{"a", nonce + " 0"}, "a" + nonce + " 0", ""},
		{"too long for a trailer", []string{nonce + " " + strings.Repeat("9", maxTrailer+1) + "\n"}, nonce + " " + strings.Repeat("9", maxTrailer+1) + "\n", ""},
	} {
		t.Run("last/"+c.name, func(t *testing.T) {
			sc := trailerScanner{needle: []byte(nonce + " "), last: true}
			var out strings.Builder
			emit := func(b []byte) { out.Write(b) }
			for _, ch := range c.chunks {
				sc.feed([]byte(ch), emit)
			}
			sc.flush(emit)
			line := ""
			if sc.complete {
				line = string(sc.line)
			}
			if out.String() != c.out || line != c.line {
				t.Fatalf("out %q held %q; want out %q held %q", out.String(), line, c.out, c.line)
			}
		})
	}
	t.Run("no trailer keeps everything", func(t *testing.T) {
		st := NewStreams(true, nonce)
		o := sandbox.NewOutput(0, nil)
		st.Attach(o)
		st.write(0, []byte{ReadyMarker, AckMarker})
		st.write(0, []byte("all of it"))
		st.End()
		var res sandbox.Result
		o.Fill(&res)
		if res.Stdout != "all of it" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})
}

// Trailers says when a trailer has come on both streams, in either order:
// with a secret nonce, the run's end.
func TestStreamsTrailers(t *testing.T) {
	t.Parallel()
	const nonce = TrailerTag + "0123456789abcdef"
	st := NewStreams(true, nonce)
	st.Attach(sandbox.NewOutput(0, nil))
	st.write(0, []byte{ReadyMarker, AckMarker})
	st.write(1, []byte(nonce+" 0 0\n"))
	select {
	case <-st.Trailers():
		t.Fatal("Trailers closed with the stderr trailer alone")
	default:
	}
	st.write(0, []byte(nonce+" 0 0 0\n"))
	select {
	case <-st.Trailers():
	default:
		t.Fatal("Trailers not closed once both trailers came")
	}
	st.write(1, []byte("more\n")) // a later write keeps it closed
}

// Command: the python supervisor when there is a python3, with its options
// in the order SupervisorProgram reads them; never the nonce.
func TestCommand(t *testing.T) {
	t.Parallel()
	in := sandbox.Interpreter{Path: "/usr/bin/python3"}
	sh := Command("python", in, Supervisor{Hold: true})
	if sh[0] != "/bin/sh" || sh[2] != SupervisorScript || sh[4] != "main.py" || sh[5] != "1" {
		t.Errorf("shell supervisor: %q", sh[:6])
	}
	py := Command("python", in, Supervisor{Python: "/usr/bin/python3", Before: "ulimit -n 64\n", Hold: true, Relay: []string{"/s", "3128", "relay"}})
	want := []string{"/bin/sh", "-c", "ulimit -n 64\nexec \"$@\"", "codeexec-supervisor", "/usr/bin/python3", "-I", "-S", "-B", "-c", SupervisorProgram, "--hold", "--relay", "/s", "3128", "relay", "main.py", "/usr/bin/python3"}
	if !slices.Equal(py[:len(want)], want) {
		t.Errorf("python supervisor: %q", py[:len(want)])
	}
	if c := Command("bash", in, Supervisor{Python: "/usr/bin/python3"}); c[0] != "/usr/bin/python3" || c[6] != "main.sh" {
		t.Errorf("python supervisor without options: %q", c[6:])
	}
	if strings.Contains(strings.Join(py, " "), TrailerTag) {
		t.Error("the command holds a nonce")
	}
}
