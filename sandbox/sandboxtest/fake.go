package sandboxtest

import (
	"context"

	"github.com/codeexec/codeexec/sandbox"
)

// Fake is a sandbox.Runner built from function fields, for testing the
// layers above a runner. A nil RunFunc returns an empty successful Result.
type Fake struct {
	RunFunc   func(ctx context.Context, req sandbox.Request) (*sandbox.Result, error)
	Caps      sandbox.Capabilities
	CloseFunc func() error
}

var _ sandbox.Runner = (*Fake)(nil)

// Run calls RunFunc.
func (f *Fake) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if f.RunFunc == nil {
		return &sandbox.Result{Sandbox: f.Caps.Mode}, nil
	}
	return f.RunFunc(ctx, req)
}

// Capabilities returns Caps.
func (f *Fake) Capabilities() sandbox.Capabilities { return f.Caps }

// Close calls CloseFunc if set.
func (f *Fake) Close() error {
	if f.CloseFunc != nil {
		return f.CloseFunc()
	}
	return nil
}
