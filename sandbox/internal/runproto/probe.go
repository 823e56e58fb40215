package runproto

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/datascience"
)

// ProbeScript is a POSIX sh script that tells what a sandbox image offers,
// run once at start in a container (or pod) locked down like a run's: the
// uid code runs as, whether env --default-signal works (the supervisor needs
// it), python3's path, whether localhost resolves without /etc/hosts, the
// network interfaces, and for each enabled language the interpreter found
// on PATH and what its ProbeArgs print (for python, which notable packages
// programs can import). ParseProbe reads what it prints.
func ProbeScript(enabled []string) string {
	var b strings.Builder
	b.WriteString("echo \"@@uid $(id -u)\"\n")
	b.WriteString("if env --default-signal=INT,QUIT true >/dev/null 2>&1; then echo '@@envsig'; fi\n")
	// A python3 that can make itself not dumpable runs each run's
	// supervisor (SupervisorProgram), and in docker mode the sessions' and
	// the egress relay.
	b.WriteString("if p=$(command -v python3) && \"$p\" -I -S -c 'import ctypes; ctypes.CDLL(None).prctl' </dev/null >/dev/null 2>&1; then echo \"@@python3 $p\"; fi\n")
	// Whether a container's own network namespace will do (docker mode):
	// localhost resolves without the engine's /etc/hosts, and loopback is
	// the only interface.
	b.WriteString("if getent hosts localhost >/dev/null 2>&1; then echo '@@localhost'; fi\n")
	b.WriteString("{ read -r _; read -r _; while IFS=: read -r i _; do echo \"@@netif $i\"; done; } </proc/net/dev\n")
	for _, name := range sandbox.LanguageNames() {
		if !slices.Contains(enabled, name) {
			continue
		}
		spec := sandbox.Languages[name]
		fmt.Fprintf(&b, "echo '@@begin %s'\nfound=''\nfor c in %s; do if p=$(command -v \"$c\"); then found=$p; break; fi; done\n",
			name, ShellQuoteAll(spec.Interpreters))
		fmt.Fprintf(&b, "if [ -n \"$found\" ]; then echo \"$found\"; \"$found\" %s </dev/null 2>&1; echo \"@@rc $?\"; else echo '@@missing'; fi\necho '@@end'\n",
			ShellQuoteAll(spec.ProbeArgs))
		if name == "python" {
			// Which notable packages programs can import (find_spec: no import).
			fmt.Fprintf(&b, "if [ -n \"$found\" ]; then echo \"@@packages $(\"$found\" -I -B -c %s %s </dev/null 2>/dev/null)\"; fi\n",
				ShellQuote(datascience.ProbeProgram), ShellQuoteAll(datascience.NotablePackages))
		}
	}
	return b.String()
}

// Probe is what ProbeScript printed.
type Probe struct {
	// UID is the uid code runs as ("" when the script printed none).
	UID string
	// EnvDefaultSignal: env --default-signal works.
	EnvDefaultSignal bool
	// Python3 is python3's path in the image ("" when it has none, or
	// its ctypes cannot call prctl): it runs SupervisorProgram.
	Python3 string
	// Localhost: the image resolves localhost without /etc/hosts.
	Localhost bool
	// NetIfs are the network interfaces the container saw.
	NetIfs []string
	// Interpreters are the enabled languages' interpreters that run.
	Interpreters map[string]sandbox.Interpreter
	// Languages is the status of every language codeexec knows.
	Languages []sandbox.LanguageStatus
	// PackagesErr says why the notable python packages are unknown.
	PackagesErr error
	// Other are the lines that start with "@@" that ProbeScript does not
	// print: a mode's own additions to the script.
	Other []string
}

// ParseProbe reads what ProbeScript printed in image, with the languages
// enabled.
func ParseProbe(out, image string, enabled []string) Probe {
	p := Probe{Interpreters: map[string]sandbox.Interpreter{}}
	type found struct {
		lines   []string
		missing bool
		rc      int
	}
	got := map[string]*found{}
	var cur *found
	var pkgs []sandbox.Package
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "@@packages "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "@@packages ")), &pkgs); err != nil {
				p.PackagesErr = err
				pkgs = nil
			}
		case strings.HasPrefix(line, "@@uid "):
			p.UID = strings.TrimSpace(strings.TrimPrefix(line, "@@uid "))
		case line == "@@envsig":
			p.EnvDefaultSignal = true
		case line == "@@localhost":
			p.Localhost = true
		case strings.HasPrefix(line, "@@netif "):
			p.NetIfs = append(p.NetIfs, strings.TrimSpace(strings.TrimPrefix(line, "@@netif ")))
		case strings.HasPrefix(line, "@@python3 "):
			p.Python3 = strings.TrimSpace(strings.TrimPrefix(line, "@@python3 "))
		case strings.HasPrefix(line, "@@begin "):
			cur = &found{}
			got[strings.TrimPrefix(line, "@@begin ")] = cur
		case cur == nil:
			if strings.HasPrefix(line, "@@") {
				p.Other = append(p.Other, line)
			}
		case line == "@@missing":
			cur.missing = true
		case strings.HasPrefix(line, "@@rc "):
			cur.rc, _ = strconv.Atoi(strings.TrimPrefix(line, "@@rc "))
		case line == "@@end":
			cur = nil
		default:
			cur.lines = append(cur.lines, strings.TrimSpace(line))
		}
	}
	for _, name := range sandbox.LanguageNames() {
		spec := sandbox.Languages[name]
		st := sandbox.LanguageStatus{Name: name}
		f := got[name]
		switch {
		case !slices.Contains(enabled, name):
			st.Reason = "disabled by CODE_EXEC_LANGUAGES"
		case f == nil || f.missing || len(f.lines) == 0:
			st.Reason = fmt.Sprintf("interpreter not found in the image %s (looked for %s)", image, strings.Join(spec.Interpreters, ", "))
		case f.rc != 0:
			st.Reason = fmt.Sprintf("%s does not run in the image %s (exit %d): %s", f.lines[0], image, f.rc, strings.Join(f.lines[1:], " "))
		default:
			in := sandbox.Interpreter{Path: f.lines[0]}
			if len(f.lines) >= 2 && filepath.IsAbs(f.lines[1]) {
				in.Path = f.lines[1]
			}
			if len(f.lines) >= 3 {
				in.Version = f.lines[2]
			}
			p.Interpreters[name] = in
			st.Available, st.Version, st.Interpreter = true, in.Version, in.Path
			if name == "python" {
				st.Packages = pkgs
			}
		}
		p.Languages = append(p.Languages, st)
	}
	return p
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellQuoteAll quotes each word for a POSIX shell and joins them with spaces.
func ShellQuoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = ShellQuote(w)
	}
	return strings.Join(q, " ")
}
