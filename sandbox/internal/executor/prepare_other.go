//go:build !linux

package executor

import (
	"errors"
	"fmt"

	"github.com/codeexec/codeexec/sandbox"
)

// errEgressNeedsLinux refuses a Spec with EgressServe: the listener lives
// in the run's network namespace. (On macOS process mode serves the egress
// proxy on a loopback port of the run's own instead.)
var errEgressNeedsLinux = errors.New("egress needs a network namespace, which needs Linux")

// Prepared is Linux only: there is no supervisor to start ahead here.
type Prepared struct{}

// Prepare says that supervisors are started ahead on Linux only.
func Prepare(Spec) (*Prepared, error) {
	return nil, fmt.Errorf("prepared supervisors need Linux")
}

// PID is 0.
func (p *Prepared) PID() int { return 0 }

// Alive reports false.
func (p *Prepared) Alive() bool { return false }

// Loaded is nil.
func (p *Prepared) Loaded() <-chan struct{} { return nil }

// Failed is nil.
func (p *Prepared) Failed() <-chan struct{} { return nil }

// Preloaded reports false.
func (p *Prepared) Preloaded() bool { return false }

// Close does nothing.
func (p *Prepared) Close() {}

func (p *Prepared) handOver(Spec, *sandbox.Output) (*supervised, error) {
	return nil, fmt.Errorf("prepared supervisors need Linux")
}
