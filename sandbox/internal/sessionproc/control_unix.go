//go:build unix

package sessionproc

import (
	"os"
	"path/filepath"
	"syscall"
)

// openControl makes the FIFOs of a fresh control channel, hands them to
// the session's user, and opens the server's ends.
func (s *Session) openControl() (*controlChannel, error) {
	// Nothing of the session runs now, and the folder is the server's (or
	// the session user's, which runs nothing yet): nothing can swap these
	// paths between their creation and the opens below; O_NOFOLLOW holds
	// anyway.
	ch := &controlChannel{in: filepath.Join(s.ctl, randomName("in-")), out: filepath.Join(s.ctl, randomName("out-"))}
	for _, p := range []string{ch.in, ch.out} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return nil, ch.fail("creating the session's control channel", err)
		}
		if uid, gid, ok := s.h.Owner(); ok {
			if err := os.Lchown(p, uid, gid); err != nil {
				return nil, ch.fail("handing the control channel to the sandbox user", err)
			}
		}
		// O_RDWR: opening never waits for the other end, and the server's
		// end stays valid whatever the supervisor does.
		f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, ch.fail("opening the session's control channel", err)
		}
		ch.files = append(ch.files, f)
	}
	return ch, nil
}
