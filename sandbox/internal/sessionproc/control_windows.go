//go:build windows

package sessionproc

import (
	"errors"
	"fmt"

	"github.com/codeexec/codeexec/sandbox"
)

// errNoFIFOs says why sessions of process mode and mode none do not start
// on Windows.
var errNoFIFOs = errors.New("sessions of this mode need a Unix system (their control channel is a pair of FIFOs); one-off runs work on Windows")

// openControl fails on Windows: there are no FIFOs.
func (s *Session) openControl() (*controlChannel, error) {
	return nil, fmt.Errorf("%w: %w", sandbox.ErrSandboxUnavailable, errNoFIFOs)
}
