//go:build !unix

package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// socketFile fails: a session's listener uses its own Accept (see
// listener).
func socketFile(syscall.Conn) (*os.File, error) { return nil, errors.ErrUnsupported }

func acceptNow(uintptr) (net.Conn, error) { return nil, errors.ErrUnsupported }

func dropQueued(uintptr) {}
