package server

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/egress"
)

// RenderText is the text content a model reads: stdout, then stderr, then
// how the run ended.
func RenderText(o ExecuteOutput, timeout time.Duration, outputCap string) string {
	var b strings.Builder
	section := func(name, body string) {
		if body == "" {
			return
		}
		fmt.Fprintf(&b, "%s:\n%s", name, body)
		if !strings.HasSuffix(body, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	section("stdout", o.Stdout)
	section("stderr", o.Stderr)
	if o.Stdout == "" && o.Stderr == "" {
		b.WriteString("(no output)\n\n")
	}
	section("network", renderNetwork(o.Network))
	if p := o.Packages; p != nil {
		how := "from the cache"
		if !p.Cached {
			how = "installed in " + fmtMillis(p.InstallMS)
		}
		fmt.Fprintf(&b, "Packages: %s (%s).\n\n", strings.Join(p.List, ", "), how)
	}
	ran := fmt.Sprintf("after %s in the %s sandbox", fmtMillis(o.DurationMS), o.Sandbox)
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "Timed out: the run was stopped at its %s limit (%s). Make the code faster or ask for a longer timeout_seconds, within the cap shown by sandbox_info.", timeout, ran)
	case o.OOMKilled:
		fmt.Fprintf(&b, "Out of memory: the run was killed at its memory limit (%s). Use less memory, for example by processing data in chunks.", ran)
	case o.Truncated:
		fmt.Fprintf(&b, "Output limit reached: the run wrote more than %s and was stopped; the output above is cut (%s). Print less, for example a summary.", outputCap, ran)
	case o.Signal != "":
		fmt.Fprintf(&b, "Killed by signal %s, exit code %d (%s).", o.Signal, o.ExitCode, ran)
	default:
		fmt.Fprintf(&b, "Exit code %d (%s).", o.ExitCode, ran)
	}
	if o.StateLost {
		fmt.Fprintf(&b, " The session's interpreter was stopped, so the variables of earlier calls are lost; its files remain, and the next call in session %s starts a fresh interpreter.", o.SessionID)
	}
	if len(o.Artifacts) > 0 {
		b.WriteString("\n\nFiles the run made or changed:")
		for _, a := range o.Artifacts {
			fmt.Fprintf(&b, "\n- %s (%s, %s)", a.Path, a.MIMEType, artifacts.FormatBytes(a.Size))
			if a.URI != "" {
				fmt.Fprintf(&b, " %s", a.URI)
			}
		}
	}
	if o.ArtifactsNote != "" {
		b.WriteString("\n\n" + o.ArtifactsNote)
	}
	return b.String()
}

// reasonText says why the egress proxy refused a destination.
var reasonText = map[egress.Reason]string{
	egress.ReasonNotAllowed:     "not on the allowlist",
	egress.ReasonPort:           "port not allowed for this host",
	egress.ReasonPrivateAddress: "private or internal address",
	egress.ReasonCap:            "the run's network cap was reached",
	egress.ReasonUnresolved:     "name not resolved",
	egress.ReasonUnreachable:    "unreachable",
	egress.ReasonBadRequest:     "not a request the proxy forwards",
}

// renderNetwork lists, one line each, what the run reached and what was
// refused, or "" when nothing went through the proxy.
func renderNetwork(r *egress.Report) string {
	if r.Empty() {
		return ""
	}
	var b strings.Builder
	for _, d := range r.Reached {
		fmt.Fprintf(&b, "reached %s (%s, %d connection%s, %d bytes sent, %d received)\n", hostPortText(d.Host, d.Port), d.Address,
			d.Connections, map[bool]string{true: "", false: "s"}[d.Connections == 1], d.BytesSent, d.BytesReceived)
	}
	for _, d := range r.Refused {
		why := reasonText[d.Reason]
		if d.Detail != "" {
			why += ": " + d.Detail
		}
		fmt.Fprintf(&b, "refused %s (%s)\n", hostPortText(d.Host, d.Port), why)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "... and %d more destinations\n", r.Omitted)
	}
	return b.String()
}

func hostPortText(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func fmtMillis(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// formatBytes writes a byte count the way it is configured (256m, 64k, 1g).
func formatBytes(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dg", n/(1<<30))
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n/(1<<20))
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dk", n/(1<<10))
	}
	return fmt.Sprintf("%d", n)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
