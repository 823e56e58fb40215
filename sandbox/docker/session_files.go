package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
)

// Files in and artifacts out in a session's container.
//
// The session's working directory, /tmp, lives in the container, so the
// server reaches it through a helper: a shell exec'd into the container as
// the session's user (nothing it does is beyond what the session's own code
// may do), kept for the session's life, since an exec per call would cost
// more than the call (tens of milliseconds). A call that kills every
// process of the container (a timeout) kills the helper too; the next one
// starts when it is needed. It takes commands on its stdin:
//   - "files <n>" and n file records (fileRecords): it writes each file into
//     /tmp, refusing a path whose folders are links or files (as
//     artifacts.Write does on the host), and answers "ok", or
//     "refused <index> folder <path>", "refused <index> dir" or
//     "refused <index> cannot <why>" (a folder the code made read-only).
//   - "changes": it answers with the size of a tar stream, then the stream:
//     the files of /tmp whose status changed since its mark in /dev/shm (all
//     of them the first time), the mark then set to a second before it
//     began, since file times tick coarsely. A file that the margin lists
//     again is compared with what the server saw last time
//     (artifacts.CollectNext), so it is reported once. Folders that
//     artifacts.DefaultIgnore leaves out are not looked into.
const sessionHelperScript = `set -f
cd /tmp || exit 125
m=/dev/shm/.codeexec-mark-a; n=/dev/shm/.codeexec-mark-b; t=/dev/shm/.codeexec-changes.tar; l=/dev/shm/.codeexec-changes.list
if [ -e "$n" ] && { [ ! -e "$m" ] || [ "$n" -nt "$m" ]; }; then x=$m; m=$n; n=$x; fi
place() {
  case "$2" in */*)
    p=.; IFS=/
    for c in ${2%/*}; do
      p=$p/$c
      if [ -L "$p" ] || { [ -e "$p" ] && [ ! -d "$p" ]; }; then unset IFS; r="refused $1 folder ${p#./}"; return 1; fi
      [ -d "$p" ] || mkdir "$p" 2>/dev/null || { unset IFS; r="refused $1 cannot the folder ${p#./} could not be made"; return 1; }
    done
    unset IFS;;
  esac
  if [ -d "./$2" ] && [ ! -L "./$2" ]; then r="refused $1 dir"; return 1; fi
  rm -f "./$2" 2>/dev/null && true 2>/dev/null > "./$2" || { r="refused $1 cannot it could not be written there"; return 1; }
}
while IFS=' ' read -r cmd nf; do
  case "$cmd" in
  files)
    case "$nf" in ''|*[!0-9]*) exit 125;; esac
    i=0; r=
    while [ "$i" -lt "$nf" ]; do
      IFS= read -r h || exit 125
      size=${h%% *}; rel=${h#* }
      case "$size" in ''|*[!0-9]*) exit 125;; esac
      if [ -z "$r" ] && place "$i" "$rel"; then
        head -c "$size" > "./$rel" || exit 125
      else
        head -c "$size" > /dev/null || exit 125
      fi
      i=$((i+1))
    done
    echo "${r:-ok}";;
  changes)
    if [ -e "$m" ]; then set -- -cnewer "$m"; else set --; fi
    touch -d '1 second ago' "$n" || exit 125
    find . -mindepth 1 \( -type d \( -name '.*' -o -name __pycache__ \) -prune \) -o \( ! -type d "$@" -print0 \) > "$l"
    x=$m; m=$n; n=$x
    if [ -s "$l" ]; then
      tar -c -f - --null --no-recursion -T "$l" > "$t" 2>/dev/null
      wc -c < "$t" && cat "$t" || exit 125
    else
      echo 0
    fi;;
  *) exit 125;;
  esac
done
`

// archiveTimeout bounds how long the helper may take to send the changes of
// a call.
const archiveTimeout = 30 * time.Second

// maxHelperLine bounds a line that the helper answers with.
const maxHelperLine = 4 << 10

// helperExec is a session's running helper.
type helperExec struct {
	att  client.HijackedResponse
	out  *bufio.Reader // its stdout
	diag *limitedBuffer
	done chan struct{} // closed when its output has ended
}

func (h *helperExec) close() {
	h.att.Close()
	<-h.done
}

// errHelperGone: the helper ended (a call killed it); a new one may do.
var errHelperGone = errors.New("the helper ended")

// helper returns the session's helper, starting one if there is none or
// the last one has ended.
func (s *containerSession) helper(ctx context.Context) (*helperExec, error) {
	if h := s.filesHelper; h != nil {
		select {
		case <-h.done:
			h.close()
			s.filesHelper = nil
		default:
			return h, nil
		}
	}
	_, att, err := s.execIn(ctx, []string{"/bin/sh", "-c", sessionHelperScript})
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	h := &helperExec{att: att, out: bufio.NewReaderSize(pr, maxHelperLine), diag: &limitedBuffer{max: driverDiagnostics}, done: make(chan struct{})}
	go func() {
		_, err := stdcopy.StdCopy(pw, h.diag, att.Reader)
		if err == nil {
			err = errHelperGone
		}
		_ = pw.CloseWithError(err)
		close(h.done)
	}()
	s.filesHelper = h
	return h, nil
}

// withHelper runs do with the session's helper within timeout, once more
// with a new helper if the one it had was gone; a helper that failed
// otherwise is closed, so that the next use starts a fresh one.
func (s *containerSession) withHelper(ctx context.Context, timeout time.Duration, do func(h *helperExec) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		h, err := s.helper(ctx)
		if err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { h.att.Close() })
		err = do(h)
		stop()
		if err == nil {
			return nil
		}
		var fe *artifacts.FileError
		if errors.As(err, &fe) {
			return err
		}
		h.close()
		s.filesHelper = nil
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%v: %w", err, cerr)
		}
		if !errors.Is(err, errHelperGone) || attempt > 0 {
			if d := strings.TrimSpace(h.diag.String()); d != "" {
				err = fmt.Errorf("%w (%s)", err, d)
			}
			return err
		}
	}
}

// readLine reads one line of the helper's, without its newline.
func (h *helperExec) readLine() (string, error) {
	line, err := h.out.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("the helper's answer is too long")
		}
		return "", err
	}
	return strings.TrimSuffix(string(line), "\n"), nil
}

// writeFiles writes a call's files into the session's /tmp. A path it will
// not write is an error wrapping artifacts.ErrInvalidFile.
func (s *containerSession) writeFiles(ctx context.Context, files []artifacts.Input) error {
	if len(files) == 0 {
		return nil
	}
	err := s.withHelper(ctx, engineTimeout, func(h *helperExec) error {
		written := make(chan error, 1)
		go func() {
			_, err := io.Copy(h.att.Conn, io.MultiReader(strings.NewReader("files "+strconv.Itoa(len(files))+"\n"), fileRecords(files)))
			written <- err
		}()
		reply, err := h.readLine()
		if werr := <-written; err == nil && werr != nil {
			err = werr
		}
		if err != nil {
			return err
		}
		return filesReply(reply, files)
	})
	if err == nil || errors.Is(err, artifacts.ErrInvalidFile) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("docker: writing the call's files: %w", cerr)
	}
	return fmt.Errorf("docker: %w: writing the call's files into the session's container: %v", sandbox.ErrSandboxUnavailable, err)
}

// filesReply reads the helper's answer to the files command.
func filesReply(reply string, files []artifacts.Input) error {
	if reply == "ok" {
		return nil
	}
	if rest, ok := strings.CutPrefix(reply, "refused "); ok {
		f := strings.SplitN(rest, " ", 3)
		if i, err := strconv.Atoi(f[0]); err == nil && i >= 0 && i < len(files) && len(f) >= 2 {
			reason := "is a folder in the working directory already; give the path of a file"
			switch {
			case f[1] == "folder" && len(f) == 3:
				reason = fmt.Sprintf("needs %q to be a folder, but the working directory has a symbolic link or a file there", f[2])
			case f[1] == "cannot" && len(f) == 3:
				// The session's code took the permission away.
				reason = "was not written: " + f[2] + " (the session's code may have made the folder read-only)"
			}
			return &artifacts.FileError{Index: i, Path: files[i].Path, Reason: reason}
		}
	}
	return fmt.Errorf("the helper answered %q", reply)
}

// collectChanges returns the files of the session's /tmp that changed since
// the previous call, compared with before, and what to compare the next
// call's with. A failure is reported in the Collection (Incomplete): the
// call itself happened.
func (s *containerSession) collectChanges(before artifacts.Snapshot, opts artifacts.Options) (*artifacts.Collection, artifacts.Snapshot) {
	var c *artifacts.Collection
	var next artifacts.Snapshot
	err := s.withHelper(context.Background(), archiveTimeout, func(h *helperExec) error {
		if _, err := io.WriteString(h.att.Conn, "changes\n"); err != nil {
			return errHelperGone
		}
		line, err := h.readLine()
		if err != nil {
			return err
		}
		size, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("the helper answered %q", line)
		}
		stream := &io.LimitedReader{R: h.out, N: size}
		c, next, err = artifacts.CollectNext(artifacts.TarSource{R: stream}, before, opts)
		if err != nil {
			return err
		}
		// Collect may stop early (a cap): the rest of the stream goes.
		if _, err := io.Copy(io.Discard, stream); err != nil {
			return err
		}
		if stream.N > 0 {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	if err != nil {
		if c == nil {
			c = &artifacts.Collection{}
		}
		c.Incomplete = "the working directory could not be read to the end (" + err.Error() + ")"
		next = artifacts.Snapshot{}
	}
	return c, next
}
