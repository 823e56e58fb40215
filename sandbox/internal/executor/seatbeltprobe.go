package executor

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// SeatbeltProbeArg is the helper that process mode's start-up probe runs
// under a Seatbelt profile (macOS): it tries what a run may do and what it
// must not, and prints a JSON object of check → outcome.
const SeatbeltProbeArg = "__codeexec-seatbelt-probe"

// The checks of the Seatbelt probe.
const (
	ProbeReadRun      = "read a file of the run directory"
	ProbeWriteRun     = "write a file in the run directory"
	ProbeReadOutside  = "read a file outside the run directory"
	ProbeListHome     = "list the home folder"
	ProbeWriteOutside = "write a file outside the run directory"
	ProbeConnect      = "connect to a port on the loopback"
)

// The outcomes of a check.
const (
	ProbeOK      = "done"
	ProbeRefused = "refused"
)

// SeatbeltProbe are the arguments of the probe helper: the files it
// reads and writes, the folder it lists, the address it connects to.
type SeatbeltProbe struct {
	ReadRun, WriteRun, ReadOutside, WriteOutside, Home, Connect string
}

// Args are the helper's arguments.
func (p SeatbeltProbe) Args() []string {
	return []string{SeatbeltProbeArg, p.ReadRun, p.WriteRun, p.ReadOutside, p.WriteOutside, p.Home, p.Connect}
}

// Run tries each check and returns its outcome: ProbeOK, ProbeRefused
// (the system said "operation not permitted" or "permission denied"), or
// the error of another failure, which proves nothing.
func (p SeatbeltProbe) Run() map[string]string {
	out := map[string]string{}
	try := func(check string, err error) {
		switch {
		case err == nil:
			out[check] = ProbeOK
		case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EPERM):
			out[check] = ProbeRefused
		default:
			out[check] = "failed: " + err.Error()
		}
	}
	_, err := os.ReadFile(p.ReadRun)
	try(ProbeReadRun, err)
	try(ProbeWriteRun, os.WriteFile(p.WriteRun, []byte("probe\n"), 0o600))
	_, err = os.ReadFile(p.ReadOutside)
	try(ProbeReadOutside, err)
	_, err = os.ReadDir(p.Home)
	try(ProbeListHome, err)
	try(ProbeWriteOutside, os.WriteFile(p.WriteOutside, []byte("probe\n"), 0o600))
	c, err := net.DialTimeout("tcp", p.Connect, 10*time.Second)
	if c != nil {
		_ = c.Close()
	}
	try(ProbeConnect, err)
	return out
}

// seatbeltProbeMain is the probe helper: its arguments are those of
// SeatbeltProbe.Args after the first.
func seatbeltProbeMain() int {
	a := os.Args[2:]
	if len(a) != 6 {
		os.Stderr.WriteString("codeexec: the seatbelt probe takes 6 arguments\n")
		return 2
	}
	p := SeatbeltProbe{ReadRun: a[0], WriteRun: a[1], ReadOutside: a[2], WriteOutside: a[3], Home: a[4], Connect: a[5]}
	if err := json.NewEncoder(os.Stdout).Encode(p.Run()); err != nil {
		return 1
	}
	return 0
}
