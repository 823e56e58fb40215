//go:build !linux

package process

import (
	"errors"
	"os"

	"github.com/codeexec/codeexec/sandbox"
)

// cgroupManager is Linux only.
type cgroupManager struct{}

type runCgroup struct{ procs []*os.File }

func newCgroupManager() (*cgroupManager, error) { return nil, errors.New("cgroups need Linux") }

func (m *cgroupManager) create(string, sandbox.Limits) (*runCgroup, error) {
	return nil, errors.New("cgroups need Linux")
}
func (m *cgroupManager) describe() string { return "" }
func (m *cgroupManager) close()           {}
func (c *runCgroup) oomKills() int        { return 0 }
func (c *runCgroup) remove()              {}
func (c *runCgroup) setLimits(sandbox.Limits) error {
	return errors.New("cgroups need Linux")
}
