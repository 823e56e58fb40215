//go:build windows && wine

package executor

import _ "unsafe" // go:linkname

// Built with -tags wine (and -ldflags=-checklinkname=0), for the tests that
// .ci/run runs under Wine: Wine 8 (Debian 12's) does not implement
// FileDispositionInformationEx, which os.Remove and os.RemoveAll try first
// on Windows; its answer (STATUS_NOT_IMPLEMENTED) is not one on which Go
// falls back to the older way, which Wine implements. This makes Go use
// that way from the start. Nothing else is built with this tag.

//go:linkname deleteatFallback internal/syscall/windows.TestDeleteatFallback
var deleteatFallback bool

func init() { deleteatFallback = true }
