//go:build !linux

package executor

import (
	"fmt"

	"github.com/codeexec/codeexec/sandbox"
)

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

// Close does nothing.
func (p *Prepared) Close() {}

func (p *Prepared) handOver(Spec, *sandbox.Output) (*supervised, error) {
	return nil, fmt.Errorf("prepared supervisors need Linux")
}
