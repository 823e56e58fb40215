package executor

import (
	"net"

	"github.com/codeexec/codeexec/sandbox"
)

// Program is what a mode makes one program's Spec of, the same way for a
// one-off run and for a session's supervisor: its language, working
// directory and command, the package folder it sees, its limits and its way
// to the egress proxy.
type Program struct {
	// Lang is the program's language, Dir its working directory.
	Lang, Dir string
	// Path and Args are the command, as the mode runs Lang's programs.
	Path string
	Args []string
	// Packages is the package folder the program sees, or nil.
	Packages *sandbox.PackageDir
	Limits   sandbox.Limits
	// Serve, when not nil, is given the listener that the program's
	// HTTP_PROXY and HTTPS_PROXY point at, before the program starts: the
	// program reaches the network through the egress proxy only.
	Serve func(net.Listener)
	// Env is more of the program's environment (sandbox.Request.Env),
	// added after the mode's own.
	Env []string
}

// ProgramOf is the Program of the one-off run of req, whose program file
// is file in dir, run by the interpreter at path as lang's programs run;
// serve as Program.Serve. The run's stdin and observer are the Spec's.
func ProgramOf(req sandbox.Request, lang sandbox.LanguageSpec, path, dir, file string, serve func(net.Listener)) Program {
	return Program{
		Lang:     req.Language,
		Dir:      dir,
		Path:     path,
		Args:     lang.ProgramArgs(file, req.PackageDir != nil),
		Packages: req.PackageDir,
		Limits:   req.Limits,
		Serve:    serve,
		Env:      req.Env,
	}
}
