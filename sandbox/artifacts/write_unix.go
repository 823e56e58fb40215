//go:build unix

package artifacts

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// WriteOptions say who owns what Write creates.
type WriteOptions struct {
	// Chown makes UID:GID the owner of every file and folder that Write
	// creates, for a run that executes as another user than the server.
	Chown    bool
	UID, GID int
}

// Write writes inputs (from Decode) into dir, creating the folders their
// paths need, and returns a Snapshot of the files it wrote, with their
// contents' digests, for Collect to tell a changed input from an unchanged
// one.
//
// Write never follows a symbolic link: each folder is opened relative to its
// parent with O_NOFOLLOW, so a link already in dir (in a session's
// directory, say) ends the write with an error wrapping ErrInvalidFile
// instead of leading outside. An existing file of the same name is replaced;
// an existing folder of that name is an error wrapping ErrInvalidFile, and
// so is a folder that refuses the write (EACCES).
func Write(dir string, inputs []Input, opts WriteOptions) (Snapshot, error) {
	snap := Snapshot{entries: make(map[string]snapEntry, len(inputs))}
	if len(inputs) == 0 {
		return snap, nil
	}
	top, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return snap, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(top)
	for i, in := range inputs {
		mtime, err := writeOne(top, in, opts)
		if errors.Is(err, unix.EACCES) {
			// Only a session's directory can refuse: its code took the
			// permission away.
			err = &FileError{Path: in.Path, Reason: "was not written: " + err.Error() + " (code run earlier in the session may have made its folder read-only)"}
		}
		if err != nil {
			var fe *FileError
			if errors.As(err, &fe) {
				fe.Index = i
			}
			return snap, err
		}
		snap.entries[in.Path] = snapEntry{typ: TypeRegular, size: int64(len(in.Data)), mtime: mtime, sum: sha256.Sum256(in.Data), hashed: true}
	}
	return snap, nil
}

// writeOne writes one input below the directory top and returns its
// modification time.
func writeOne(top int, in Input, opts WriteOptions) (time.Time, error) {
	refuse := func(format string, a ...any) error {
		return &FileError{Path: in.Path, Reason: fmt.Sprintf(format, a...)}
	}
	parts := strings.Split(in.Path, "/")
	dirfd := top
	defer func() {
		if dirfd != top {
			unix.Close(dirfd)
		}
	}()
	for i, part := range parts[:len(parts)-1] {
		created := false
		err := unix.Mkdirat(dirfd, part, dirMode)
		switch {
		case err == nil:
			created = true
		case !errors.Is(err, unix.EEXIST):
			return time.Time{}, fmt.Errorf("creating the folder %q: %w", strings.Join(parts[:i+1], "/"), err)
		}
		sub, err := unix.Openat(dirfd, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return time.Time{}, refuse("needs %q to be a folder, but the working directory has a symbolic link or a file there", strings.Join(parts[:i+1], "/"))
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("opening the folder %q: %w", strings.Join(parts[:i+1], "/"), err)
		}
		if dirfd != top {
			unix.Close(dirfd)
		}
		dirfd = sub
		if created {
			if err := own(dirfd, dirMode, opts); err != nil {
				return time.Time{}, fmt.Errorf("setting up the folder %q: %w", strings.Join(parts[:i+1], "/"), err)
			}
		}
	}
	name := parts[len(parts)-1]
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return time.Time{}, refuse("is a folder in the working directory already; give the path of a file")
	case err == nil:
		// A file or link of that name (from an earlier run of a session):
		// replace it, never write through it.
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return time.Time{}, fmt.Errorf("replacing %q: %w", in.Path, err)
		}
	case !errors.Is(err, unix.ENOENT):
		return time.Time{}, fmt.Errorf("examining %q: %w", in.Path, err)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
	if err != nil {
		return time.Time{}, fmt.Errorf("creating %q: %w", in.Path, err)
	}
	f := os.NewFile(uintptr(fd), in.Path)
	defer f.Close()
	if err := own(fd, fileMode, opts); err != nil {
		return time.Time{}, fmt.Errorf("setting up %q: %w", in.Path, err)
	}
	if _, err := f.Write(in.Data); err != nil {
		return time.Time{}, fmt.Errorf("writing %q: %w", in.Path, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return time.Time{}, fmt.Errorf("examining %q: %w", in.Path, err)
	}
	if err := f.Close(); err != nil {
		return time.Time{}, fmt.Errorf("writing %q: %w", in.Path, err)
	}
	return time.Unix(st.Mtim.Unix()), nil
}

// own sets the mode of what fd names (whatever the umask) and, with
// opts.Chown, its owner.
func own(fd int, mode uint32, opts WriteOptions) error {
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	if opts.Chown {
		return unix.Fchown(fd, opts.UID, opts.GID)
	}
	return nil
}
